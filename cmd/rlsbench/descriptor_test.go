package main

import (
	"os"
	"testing"

	"google.golang.org/protobuf/proto"
)

func TestRequestTemplate(t *testing.T) {
	tmpl, err := newRequestTemplate("llm", "generic_key=llm,api_key={k};user=u{k}-{k}", 3, 10)
	if err != nil {
		t.Fatal(err)
	}
	req := tmpl.request(7)
	if req.GetDomain() != "llm" || req.GetHitsAddend() != 3 || len(req.GetDescriptors()) != 2 {
		t.Fatalf("request %v", req)
	}
	if got := descKey(req); got != "generic_key=llm,api_key=7;user=u7-7" {
		t.Errorf("descriptors %q", got)
	}
	if got := tmpl.keyName(7); got != "generic_key=llm,api_key=7;user=u7-7" {
		t.Errorf("keyName(7) = %q", got)
	}
	if tmpl.request(7) != req {
		t.Error("cached request rebuilt; want the same shared message")
	}
}

func TestRequestTemplateManyKeysBuiltOnDemand(t *testing.T) {
	tmpl, err := newRequestTemplate("d", "api_key={k}", 1, maxCachedKeys+1)
	if err != nil {
		t.Fatal(err)
	}
	if tmpl.cache != nil {
		t.Fatal("built every request ahead for more than maxCachedKeys keys")
	}
	a, b := tmpl.request(maxCachedKeys), tmpl.request(maxCachedKeys)
	if !proto.Equal(a, b) || descKey(a) != "api_key=65536" {
		t.Errorf("on-demand requests %v / %v", a, b)
	}
}

func TestParseStatCPU(t *testing.T) {
	// A command name with spaces and a ')' must not shift the fields.
	stat := "4242 (my (odd) cmd) S 1 4242 4242 0 -1 4194560 1000 0 0 0 1234 567 0 0 20 0 8 0 100 0 0"
	ticks, err := parseStatCPU(stat)
	if err != nil || ticks != 1234+567 {
		t.Errorf("parseStatCPU = %d, %v; want 1801", ticks, err)
	}
	for _, bad := range []string{"", "1 (x) S 1 2", "1 (x) S 1 2 3 4 5 6 7 8 9 u s"} {
		if _, err := parseStatCPU(bad); err == nil {
			t.Errorf("parseStatCPU(%q) succeeded", bad)
		}
	}
}

func TestReadCPUSelf(t *testing.T) {
	if _, err := os.Stat("/proc/self/stat"); err != nil {
		t.Skip("no /proc on this system")
	}
	if _, err := readCPU(os.Getpid()); err != nil {
		t.Fatal(err)
	}
	if _, err := startCPU([]int{1 << 30}); err == nil {
		t.Error("startCPU accepted a process that does not exist")
	}
}
