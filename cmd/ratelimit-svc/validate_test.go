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
	if err := runValidate([]string{"../../config"}, &out, &errOut); err != nil {
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
	runValidate([]string{"-q", dir}, &out, &errOut)
	if strings.Contains(out.String(), "(warning)") {
		t.Errorf("-q printed warnings:\n%s", out.String())
	}
}
