package deploy_test

import (
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
)

// instruction is one Dockerfile instruction, continuation lines joined.
type instruction struct {
	cmd  string // upper case
	args string
	line int
}

func dockerfile(t *testing.T) []instruction {
	t.Helper()
	var out []instruction
	var cur strings.Builder
	start := 0
	for i, l := range strings.Split(string(readFile(t, "Dockerfile")), "\n") {
		trimmed := strings.TrimSpace(l)
		if cur.Len() == 0 && (trimmed == "" || strings.HasPrefix(trimmed, "#")) {
			continue
		}
		if cur.Len() == 0 {
			start = i + 1
		}
		if strings.HasSuffix(trimmed, `\`) {
			cur.WriteString(strings.TrimSuffix(trimmed, `\`) + " ")
			continue
		}
		cur.WriteString(trimmed)
		cmd, args, _ := strings.Cut(cur.String(), " ")
		out = append(out, instruction{strings.ToUpper(cmd), strings.TrimSpace(args), start})
		cur.Reset()
	}
	return out
}

// finalStage is the instructions from the last FROM on.
func finalStage(ins []instruction) []instruction {
	last := 0
	for i, in := range ins {
		if in.cmd == "FROM" {
			last = i
		}
	}
	return ins[last:]
}

// command is the final stage's command line: ENTRYPOINT then CMD.
func command(t *testing.T) []string {
	t.Helper()
	var argv []string
	for _, in := range finalStage(dockerfile(t)) {
		if in.cmd == "ENTRYPOINT" || in.cmd == "CMD" {
			var part []string
			if err := json.Unmarshal([]byte(in.args), &part); err != nil {
				t.Fatalf("Dockerfile:%d: %s is not exec form: %v", in.line, in.cmd, err)
			}
			argv = append(argv, part...)
		}
	}
	if len(argv) == 0 {
		t.Fatal("Dockerfile: no CMD in the final stage")
	}
	return argv
}

// dockerEntrypointConfig is the --config the image's command passes.
func dockerEntrypointConfig(t *testing.T) string {
	t.Helper()
	argv := command(t)
	for i, a := range argv {
		if a == "--config" && i+1 < len(argv) {
			return argv[i+1]
		}
		if v, ok := strings.CutPrefix(a, "--config="); ok {
			return v
		}
	}
	return ""
}

// dockerUser is the numeric user of the final stage.
func dockerUser(t *testing.T) int64 {
	t.Helper()
	user := ""
	for _, in := range finalStage(dockerfile(t)) {
		if in.cmd == "USER" {
			user = in.args
		}
	}
	uid, _, _ := strings.Cut(user, ":")
	n, err := strconv.ParseInt(uid, 10, 64)
	if err != nil {
		t.Fatalf("Dockerfile: USER %q is not numeric (Kubernetes' runAsNonRoot needs a number)", user)
	}
	return n
}

func TestDockerfile(t *testing.T) {
	ins := dockerfile(t)
	froms := 0
	for _, in := range ins {
		if in.cmd == "FROM" {
			froms++
		}
	}
	if froms < 2 {
		t.Errorf("%d stages, want a build stage and a runtime stage", froms)
	}
	final := finalStage(ins)
	base := strings.Fields(final[0].args)[0]
	if !strings.HasPrefix(base, "gcr.io/distroless/static") && base != "scratch" {
		t.Errorf("runtime base %q, want distroless static or scratch", base)
	}
	if u := dockerUser(t); u == 0 {
		t.Error("the image runs as root")
	}

	var build string
	for _, in := range ins {
		if in.cmd == "RUN" && strings.Contains(in.args, "go build") {
			build = in.args
		}
	}
	for _, want := range []string{"CGO_ENABLED=0", "-trimpath", "./cmd/ratelimit-svc"} {
		if !strings.Contains(build, want) {
			t.Errorf("go build %q lacks %s", build, want)
		}
	}
	for _, m := range regexp.MustCompile(`\./cmd/[a-z0-9-]+`).FindAllString(build, -1) {
		if _, err := os.Stat(repoPath(m)); err != nil {
			t.Errorf("go build names %s: %v", m, err)
		}
	}

	exposed := map[string]bool{}
	copiedBins := map[string]bool{}
	var configCopied bool
	for _, in := range final {
		switch in.cmd {
		case "EXPOSE":
			for _, p := range strings.Fields(in.args) {
				exposed[strings.TrimSuffix(p, "/tcp")] = true
			}
		case "COPY":
			f := strings.Fields(in.args)
			dst := f[len(f)-1]
			if strings.HasPrefix(f[0], "--from=") {
				for _, src := range f[1 : len(f)-1] {
					copiedBins[filepath.Join(dst, filepath.Base(src))] = true
				}
			} else if f[0] == "config/" && strings.TrimSuffix(dst, "/") == dockerEntrypointConfig(t) {
				configCopied = true
			}
		}
	}
	if !exposed["8080"] || !exposed["8081"] {
		t.Errorf("EXPOSE %v, want 8080 and 8081", exposed)
	}
	if !configCopied {
		t.Error("config/ is not copied to the entrypoint's --config directory")
	}
	argv := command(t)
	if !copiedBins[argv[0]] || filepath.Base(argv[0]) != "ratelimit-svc" {
		t.Errorf("CMD %v does not run the ratelimit-svc binary copied from the build (%v)", argv, copiedBins)
	}
	if dockerEntrypointConfig(t) != "/etc/ratelimit/config" {
		t.Errorf("CMD %v, want --config /etc/ratelimit/config", argv)
	}
	// Drop-in for envoyproxy/ratelimit: manifests run /bin/ratelimit as
	// the container's command, with no flags. It must be the service, no
	// ENTRYPOINT may stand in front of it, and its default policy
	// directory (./config) must be the image's.
	for _, in := range final {
		if in.cmd == "ENTRYPOINT" {
			t.Errorf("Dockerfile:%d: an ENTRYPOINT would receive /bin/ratelimit as an argument", in.line)
		}
	}
	if !copiedFrom(final, "/out/ratelimit-svc", "/bin/ratelimit") {
		t.Error("/bin/ratelimit is not the ratelimit-svc binary")
	}
	workdir := ""
	for _, in := range final {
		if in.cmd == "WORKDIR" {
			workdir = in.args
		}
	}
	if filepath.Join(workdir, "config") != dockerEntrypointConfig(t) {
		t.Errorf("WORKDIR %q: ratelimit-svc with no flags reads %s/config, not the image's policies", workdir, workdir)
	}
}

// copiedFrom reports whether a COPY --from puts src at dst.
func copiedFrom(ins []instruction, src, dst string) bool {
	for _, in := range ins {
		f := strings.Fields(in.args)
		if in.cmd == "COPY" && len(f) == 3 && strings.HasPrefix(f[0], "--from=") && f[1] == src && f[2] == dst {
			return true
		}
	}
	return false
}

// ignorePattern is one .dockerignore line.
type ignorePattern struct {
	re     *regexp.Regexp
	negate bool
}

func dockerignore(t *testing.T) []ignorePattern {
	t.Helper()
	var ps []ignorePattern
	for _, l := range strings.Split(string(readFile(t, ".dockerignore")), "\n") {
		l = strings.TrimSpace(l)
		if l == "" || strings.HasPrefix(l, "#") {
			continue
		}
		p := ignorePattern{}
		l, p.negate = strings.CutPrefix(l, "!")
		l = filepath.ToSlash(filepath.Clean(strings.TrimPrefix(l, "/")))
		var re strings.Builder
		re.WriteString("^")
		for i := 0; i < len(l); i++ {
			switch {
			case strings.HasPrefix(l[i:], "**/"):
				re.WriteString("(.*/)?")
				i += 2
			case strings.HasPrefix(l[i:], "**"):
				re.WriteString(".*")
				i++
			case l[i] == '*':
				re.WriteString("[^/]*")
			case l[i] == '?':
				re.WriteString("[^/]")
			default:
				re.WriteString(regexp.QuoteMeta(l[i : i+1]))
			}
		}
		re.WriteString("$")
		p.re = regexp.MustCompile(re.String())
		ps = append(ps, p)
	}
	return ps
}

// ignored applies .dockerignore to a path of the build context: the last
// pattern matching the path or one of its parents decides.
func ignored(ps []ignorePattern, path string) bool {
	out := false
	parts := strings.Split(path, "/")
	for _, p := range ps {
		for i := 1; i <= len(parts); i++ {
			if p.re.MatchString(strings.Join(parts[:i], "/")) {
				out = !p.negate
				break
			}
		}
	}
	return out
}

// TestDockerBuildContext checks that everything the build copies and
// compiles is in the build context, and that tests are not.
func TestDockerBuildContext(t *testing.T) {
	ps := dockerignore(t)
	var sources []string
	for _, in := range dockerfile(t) {
		if in.cmd != "COPY" || strings.HasPrefix(in.args, "--from=") {
			continue
		}
		f := strings.Fields(in.args)
		for _, src := range f[:len(f)-1] {
			if strings.HasPrefix(src, "--") {
				continue
			}
			src = strings.TrimSuffix(src, "/")
			sources = append(sources, src)
			if _, err := os.Stat(repoPath(src)); err != nil {
				t.Errorf("COPY %s: %v", src, err)
			}
			if ignored(ps, src) {
				t.Errorf("COPY %s: excluded by .dockerignore", src)
			}
		}
	}
	for _, p := range []string{"cmd/mockllm/main_test.go", ".git", "bin/ratelimit-svc", "deploy/prometheus.yml"} {
		if !ignored(ps, p) {
			t.Errorf(".dockerignore lets %s into the build context", p)
		}
	}

	// Every Go file the binaries compile is sent and copied.
	out, err := exec.Command("go", "list", "-e", "-deps", "-f",
		`{{if .Module}}{{if .Module.Main}}{{.Dir}}{{range .GoFiles}} {{.}}{{end}}{{range .EmbedFiles}} {{.}}{{end}}{{end}}{{end}}`,
		"../cmd/...").CombinedOutput()
	if err != nil {
		t.Fatalf("go list: %v\n%s", err, out)
	}
	rootAbs, _ := filepath.Abs(root)
	files := []string{"go.mod", "go.sum"}
	for _, l := range strings.Split(strings.TrimSpace(string(out)), "\n") {
		f := strings.Fields(l)
		if len(f) == 0 {
			continue
		}
		rel, err := filepath.Rel(rootAbs, f[0])
		if err != nil {
			t.Fatal(err)
		}
		for _, name := range f[1:] {
			files = append(files, filepath.ToSlash(filepath.Join(rel, name)))
		}
	}
	for _, f := range files {
		if ignored(ps, f) {
			t.Errorf("%s is needed by the build but excluded by .dockerignore", f)
		}
		if !slices.ContainsFunc(sources, func(s string) bool { return f == s || strings.HasPrefix(f, s+"/") }) {
			t.Errorf("%s is needed by the build but no COPY brings it", f)
		}
	}
}
