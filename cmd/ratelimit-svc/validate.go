package main

import (
	"errors"
	"flag"
	"fmt"
	"io"

	"github.com/ratelimit-svc/ratelimit-svc/pkg/policy"
)

// errInvalid reports policies with errors; the problems are already printed.
var errInvalid = errors.New("policies have errors")

// runValidate is `ratelimit-svc validate [-q] <dir or file>...`: it parses
// the policies as the service would, with the load options of the same
// environment (MERGE_DOMAIN_CONFIG, SHADOW_MODE), prints every problem as
// "file:path: message" (warnings marked), and fails when any is an error,
// for CI pipelines that check ConfigMaps before they ship.
func runValidate(args []string, getenv func(string) string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("ratelimit-svc validate", flag.ContinueOnError)
	fs.SetOutput(stderr)
	quiet := fs.Bool("q", false, "print errors only, not warnings")
	fs.Usage = func() {
		fmt.Fprintln(stderr, "usage: ratelimit-svc validate [-q] <policy dir or file>...")
		fmt.Fprintln(stderr, "MERGE_DOMAIN_CONFIG and SHADOW_MODE apply as they do to the service.")
		fs.PrintDefaults()
	}
	if err := fs.Parse(args); err != nil {
		return err
	}
	if fs.NArg() == 0 {
		fs.Usage()
		return errors.New("validate: no policy path given")
	}
	r := &envReader{getenv: getenv}
	load := r.loadOptions()
	if err := errors.Join(r.errs...); err != nil {
		return fmt.Errorf("validate: %w", err)
	}
	failed := false
	for _, path := range fs.Args() {
		snap, err := policy.LoadWith(path, load)
		if err != nil {
			return fmt.Errorf("validate: %w", err)
		}
		errs, warns := 0, 0
		for _, p := range snap.Problems() {
			if p.Severity == policy.Error {
				errs++
				fmt.Fprintln(stdout, p.String())
				continue
			}
			warns++
			if !*quiet {
				fmt.Fprintln(stdout, p.String()+" (warning)")
			}
		}
		fmt.Fprintf(stderr, "%s: %d files, %d domains, %d targets: %d errors, %d warnings\n",
			path, len(snap.Files()), len(snap.Domains()), len(snap.Targets()), errs, warns)
		failed = failed || errs > 0
	}
	if failed {
		return errInvalid
	}
	return nil
}
