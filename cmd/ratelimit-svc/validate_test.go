package main

import (
	"bytes"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestValidateExampleConfigIsClean(t *testing.T) {
	var out, errOut bytes.Buffer
	if err := runValidate([]string{"../../config"}, envOf(nil), &out, &errOut); err != nil {
		t.Fatalf("validate config/: %v\n%s%s", err, out.String(), errOut.String())
	}
	if out.Len() != 0 {
		t.Fatalf("problems in config/:\n%s", out.String())
	}
}

func TestValidateReportsEveryProblemAndFails(t *testing.T) {
	dir := t.TempDir()
	bad := "domain: api\ndescriptors:\n  - key: a\n    rate_limit: {unit: fortnight, requests_per_unit: 5}\n  - key: b\n    colour: blue\n    rate_limit: {unit: second, requests_per_unit: 1}\n"
	if err := os.WriteFile(filepath.Join(dir, "bad.yaml"), []byte(bad), 0o644); err != nil {
		t.Fatal(err)
	}
	var out, errOut bytes.Buffer
	err := run(t.Context(), []string{"validate", dir}, os.Getenv, &out, &errOut)
	if !errors.Is(err, errInvalid) {
		t.Fatalf("validate returned %v", err)
	}
	got := out.String()
	for _, want := range []string{
		"bad.yaml:descriptors[0].rate_limit.unit: ",
		"bad.yaml:descriptors[1].colour: ",
		"(warning)",
	} {
		if !strings.Contains(got, want) {
			t.Errorf("output lacks %q:\n%s", want, got)
		}
	}
	out.Reset()
	runValidate([]string{"-q", dir}, envOf(nil), &out, &errOut)
	if strings.Contains(out.String(), "(warning)") {
		t.Errorf("-q printed warnings:\n%s", out.String())
	}
}

// TestValidateUsesTheServiceLoadOptions: two files of one domain are an
// error, unless MERGE_DOMAIN_CONFIG=true merges them as the service would.
func TestValidateUsesTheServiceLoadOptions(t *testing.T) {
	dir := t.TempDir()
	for name, key := range map[string]string{"a.yaml": "a", "b.yaml": "b"} {
		p := "domain: shared\ndescriptors: [{key: " + key + ", rate_limit: {unit: second, requests_per_unit: 1}}]\n"
		if err := os.WriteFile(filepath.Join(dir, name), []byte(p), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	var out, errOut bytes.Buffer
	if err := runValidate([]string{dir}, envOf(nil), &out, &errOut); !errors.Is(err, errInvalid) ||
		!strings.Contains(out.String(), `duplicate domain "shared"`) {
		t.Fatalf("without merging: %v\n%s", err, out.String())
	}
	out.Reset()
	if err := runValidate([]string{dir}, envOf(map[string]string{"MERGE_DOMAIN_CONFIG": "true"}), &out, &errOut); err != nil {
		t.Fatalf("with MERGE_DOMAIN_CONFIG=true: %v\n%s", err, out.String())
	}
	err := runValidate([]string{dir}, envOf(map[string]string{"MERGE_DOMAIN_CONFIG": "maybe"}), &out, &errOut)
	if err == nil || !strings.Contains(err.Error(), `MERGE_DOMAIN_CONFIG: "maybe"`) {
		t.Fatalf("a malformed MERGE_DOMAIN_CONFIG: %v", err)
	}
}
