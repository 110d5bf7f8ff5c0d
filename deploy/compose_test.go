package deploy_test

import (
	"encoding/json"
	"os"
	"slices"
	"sort"
	"strconv"
	"strings"
	"testing"

	"gopkg.in/yaml.v3"
)

type composeFile struct {
	Name     string                    `yaml:"name"`
	Services map[string]composeService `yaml:"services"`
}

type composeService struct {
	Image string `yaml:"image"`
	Build *struct {
		Context    string `yaml:"context"`
		Dockerfile string `yaml:"dockerfile"`
	} `yaml:"build"`
	Entrypoint  []string          `yaml:"entrypoint"`
	Command     []string          `yaml:"command"`
	Environment map[string]string `yaml:"environment"`
	Volumes     []string          `yaml:"volumes"`
	Ports       []string          `yaml:"ports"`
	Networks    map[string]struct {
		Aliases []string `yaml:"aliases"`
	} `yaml:"networks"`
	DependsOn yaml.Node `yaml:"depends_on"`
}

func loadCompose(t *testing.T) *composeFile {
	t.Helper()
	var c composeFile
	if err := yaml.Unmarshal(readFile(t, "docker-compose.yml"), &c); err != nil {
		t.Fatalf("docker-compose.yml: %v", err)
	}
	if len(c.Services) == 0 {
		t.Fatal("docker-compose.yml: no services")
	}
	return &c
}

// names maps every host name on the compose network (service names and
// aliases) to its services.
func (c *composeFile) names() map[string][]string {
	m := map[string][]string{}
	for name, s := range c.Services {
		m[name] = append(m[name], name)
		for _, n := range s.Networks {
			for _, a := range n.Aliases {
				m[a] = append(m[a], name)
			}
		}
	}
	return m
}

func (c *composeFile) ratelimitReplicas() []string {
	var rs []string
	for name, s := range c.Services {
		if s.Image == "ratelimit-svc:dev" && len(s.Entrypoint) == 0 {
			rs = append(rs, name)
		}
	}
	sort.Strings(rs)
	return rs
}

// flagValue is the value of -name or --name in argv.
func flagValue(argv []string, name string) string {
	for i, a := range argv {
		a = strings.TrimLeft(a, "-")
		if a == name && i+1 < len(argv) {
			return argv[i+1]
		}
		if v, ok := strings.CutPrefix(a, name+"="); ok {
			return v
		}
	}
	return ""
}

// listenPorts are the container ports a compose service listens on.
func (c *composeFile) listenPorts(t *testing.T, name string) []string {
	t.Helper()
	s := c.Services[name]
	var ports []string
	addPort := func(addr string) {
		_, p := splitHostPort(addr)
		ports = append(ports, p)
	}
	switch {
	case slices.Contains(c.ratelimitReplicas(), name):
		for env, def := range map[string]string{"RLS_GRPC_ADDR": ":8081", "RLS_HTTP_ADDR": ":8080"} {
			if v := s.Environment[env]; v != "" {
				def = v
			}
			addPort(def)
		}
	case len(s.Entrypoint) > 0 && strings.HasSuffix(s.Entrypoint[0], "/mockllm"):
		addr := flagValue(s.Command, "addr")
		if addr == "" {
			addr = ":8000"
		}
		addPort(addr)
	default:
		for _, p := range s.Ports {
			ports = append(ports, p[strings.LastIndexByte(p, ':')+1:])
		}
	}
	return ports
}

func TestComposeServices(t *testing.T) {
	c := loadCompose(t)
	for _, want := range []string{"envoy", "ratelimit-1", "ratelimit-2", "redis", "mock-llm", "prometheus", "grafana"} {
		if _, ok := c.Services[want]; !ok {
			t.Errorf("no service %s", want)
		}
	}
	if img := c.Services["envoy"].Image; img != "envoyproxy/envoy:v1.40-latest" {
		t.Errorf("envoy image %q", img)
	}

	published := map[string]string{}
	for name, s := range c.Services {
		if s.Image == "" && s.Build == nil {
			t.Errorf("%s: no image and no build", name)
		}
		if s.Build != nil {
			df := s.Build.Dockerfile
			if df == "" {
				df = "Dockerfile"
			}
			if st, err := os.Stat(repoPath(s.Build.Context)); err != nil || !st.IsDir() {
				t.Errorf("%s: build context %q: %v", name, s.Build.Context, err)
			} else if _, err := os.Stat(repoPath(s.Build.Context, df)); err != nil {
				t.Errorf("%s: %v", name, err)
			}
		}
		for _, p := range s.Ports {
			host := strings.Split(p, ":")[0]
			if other, dup := published[host]; dup {
				t.Errorf("host port %s published by %s and %s", host, other, name)
			}
			published[host] = name
		}
		for _, v := range s.Volumes {
			src, rest, ok := strings.Cut(v, ":")
			if !ok || !strings.HasPrefix(src, "./") {
				t.Errorf("%s: volume %q is not a bind mount of the repository", name, v)
				continue
			}
			if _, err := os.Stat(repoPath(src)); err != nil {
				t.Errorf("%s: mounts %s: %v", name, src, err)
			}
			if !strings.HasSuffix(rest, ":ro") {
				t.Errorf("%s: %s is mounted writable", name, src)
			}
		}
		for _, dep := range dependsOn(t, s) {
			if _, ok := c.Services[dep]; !ok {
				t.Errorf("%s depends on unknown service %s", name, dep)
			}
		}
	}
}

func dependsOn(t *testing.T, s composeService) []string {
	t.Helper()
	var deps []string
	switch s.DependsOn.Kind {
	case yaml.SequenceNode:
		if err := s.DependsOn.Decode(&deps); err != nil {
			t.Fatal(err)
		}
	case yaml.MappingNode:
		var m map[string]any
		if err := s.DependsOn.Decode(&m); err != nil {
			t.Fatal(err)
		}
		for k := range m {
			deps = append(deps, k)
		}
	}
	return deps
}

// mountTarget is where a compose service mounts a repository path.
func mountTarget(s composeService, src string) string {
	for _, v := range s.Volumes {
		f := strings.Split(v, ":")
		if len(f) >= 2 && f[0] == src {
			return f[1]
		}
	}
	return ""
}

func TestComposeRatelimitReplicas(t *testing.T) {
	c := loadCompose(t)
	rs := c.ratelimitReplicas()
	if len(rs) < 2 {
		t.Fatalf("ratelimit-svc replicas %v, want ≥ 2", rs)
	}
	pods := map[string]bool{}
	for _, name := range rs {
		s := c.Services[name]
		if s.Build == nil {
			t.Errorf("%s is not built from the Dockerfile", name)
		}
		pod := s.Environment["POD_NAME"]
		if pod == "" || pods[pod] {
			t.Errorf("%s: POD_NAME %q is empty or shared", name, pod)
		}
		pods[pod] = true
		u := s.Environment["REDIS_URL"]
		host, port := splitHostPort(strings.TrimPrefix(u, "redis://"))
		if !strings.HasPrefix(u, "redis://") || c.Services[host].Image == "" || port != "6379" {
			t.Errorf("%s: REDIS_URL %q does not name the redis service", name, u)
		}
		for env := range s.Environment {
			if !slices.Contains(serviceEnv, env) {
				t.Errorf("%s: env %s: the service does not read it", name, env)
			}
		}
		// The demo targets are mounted inside the policy directory.
		if dst := mountTarget(s, "./deploy/demo"); !strings.HasPrefix(dst, dockerEntrypointConfig(t)+"/") {
			t.Errorf("%s: deploy/demo mounted at %q, outside the policy directory %s", name, dst, dockerEntrypointConfig(t))
		}
	}
}

// TestComposeEnvoy checks that envoy.yaml, as compose mounts it, reaches
// the services: every cluster address without a dot is a compose host
// name, on a port that service listens on.
func TestComposeEnvoy(t *testing.T) {
	c := loadCompose(t)
	env := c.Services["envoy"]
	if dst := mountTarget(env, "./envoy/envoy.yaml"); dst == "" || flagValue(env.Command, "c") != dst {
		t.Errorf("envoy mounts envoy/envoy.yaml at %q and runs -c %q", dst, flagValue(env.Command, "c"))
	}
	names := c.names()
	var clusters []struct {
		Name           string `json:"name"`
		LoadAssignment struct {
			Endpoints []struct {
				LbEndpoints []struct {
					Endpoint struct {
						Address struct {
							SocketAddress struct {
								Address   string `json:"address"`
								PortValue int    `json:"port_value"`
							} `json:"socket_address"`
						} `json:"address"`
					} `json:"endpoint"`
				} `json:"lb_endpoints"`
			} `json:"endpoints"`
		} `json:"load_assignment"`
	}
	var doc map[string]any
	if err := yaml.Unmarshal(readFile(t, "envoy", "envoy.yaml"), &doc); err != nil {
		t.Fatal(err)
	}
	sr, _ := doc["static_resources"].(map[string]any)
	if err := json.Unmarshal(toJSON(t, sr["clusters"]), &clusters); err != nil {
		t.Fatal(err)
	}
	local := 0
	for _, cl := range clusters {
		for _, e := range cl.LoadAssignment.Endpoints {
			for _, lb := range e.LbEndpoints {
				sa := lb.Endpoint.Address.SocketAddress
				if strings.Contains(sa.Address, ".") {
					continue // a public host
				}
				local++
				svcs := names[sa.Address]
				if len(svcs) == 0 {
					t.Errorf("envoy.yaml cluster %s points at %s, which is no compose service or alias", cl.Name, sa.Address)
				}
				for _, s := range svcs {
					if !slices.Contains(c.listenPorts(t, s), strconv.Itoa(sa.PortValue)) {
						t.Errorf("envoy.yaml cluster %s points at %s:%d, but %s listens on %v",
							cl.Name, sa.Address, sa.PortValue, s, c.listenPorts(t, s))
					}
				}
				if cl.Name == "ratelimit" && len(svcs) < 2 {
					t.Errorf("cluster ratelimit reaches %v: want every replica", svcs)
				}
			}
		}
	}
	if local == 0 {
		t.Error("envoy.yaml reaches no compose service")
	}
}

// TestComposeDemoPolicies checks the policies the compose replicas load:
// config/ plus deploy/demo, with the mock targets on an Envoy cluster
// and mock-llm failing one of them.
func TestComposeDemoPolicies(t *testing.T) {
	files := append(policyFiles(t, "config", "/etc/ratelimit/config/"),
		policyFiles(t, "deploy/demo", "/etc/ratelimit/config/demo/")...)
	s := compileClean(t, "config/ + deploy/demo", files)
	clusters := map[string]bool{}
	for _, c := range envoyYAML(t).GetStaticResources().GetClusters() {
		clusters[c.GetName()] = true
	}
	demo := compileClean(t, "deploy/demo", policyFiles(t, "deploy/demo", "demo/"))
	for _, tg := range demo.Targets() {
		if !clusters[tg.Cluster] {
			t.Errorf("demo target %s: cluster %q is not in envoy.yaml", tg.Name, tg.Cluster)
		}
		if s.Target(tg.Name) == nil {
			t.Errorf("demo target %s lost next to config/", tg.Name)
		}
	}
	failing := flagValue(loadCompose(t).Services["mock-llm"].Command, "fail-models")
	for _, m := range strings.Split(failing, ",") {
		tg := demo.TargetByModel(m)
		if tg == nil || len(tg.Fallbacks) == 0 {
			t.Errorf("mock-llm fails model %q: want a demo target with a fallback", m)
		}
	}
}

func TestPrometheusConfig(t *testing.T) {
	var cfg struct {
		Global struct {
			ScrapeInterval string `yaml:"scrape_interval"`
		} `yaml:"global"`
		ScrapeConfigs []struct {
			JobName       string `yaml:"job_name"`
			MetricsPath   string `yaml:"metrics_path"`
			StaticConfigs []struct {
				Targets []string `yaml:"targets"`
			} `yaml:"static_configs"`
		} `yaml:"scrape_configs"`
	}
	if err := yaml.Unmarshal(readFile(t, "deploy", "prometheus.yml"), &cfg); err != nil {
		t.Fatalf("prometheus.yml: %v", err)
	}
	c := loadCompose(t)
	prom := c.Services["prometheus"]
	if dst := mountTarget(prom, "./deploy/prometheus.yml"); dst == "" ||
		!slices.Contains(prom.Command, "--config.file="+dst) {
		t.Errorf("prometheus mounts deploy/prometheus.yml at %q, command %v", dst, prom.Command)
	}
	var ratelimit []string
	for _, sc := range cfg.ScrapeConfigs {
		for _, st := range sc.StaticConfigs {
			for _, target := range st.Targets {
				host, port := splitHostPort(target)
				if _, ok := c.Services[host]; !ok {
					t.Errorf("job %s scrapes %s, no compose service", sc.JobName, target)
				} else if !slices.Contains(c.listenPorts(t, host), port) {
					t.Errorf("job %s scrapes %s, but %s listens on %v", sc.JobName, target, host, c.listenPorts(t, host))
				}
				if sc.JobName == "ratelimit-svc" {
					ratelimit = append(ratelimit, host)
					if sc.MetricsPath != "/metrics" {
						t.Errorf("job ratelimit-svc metrics_path %q", sc.MetricsPath)
					}
				}
			}
		}
	}
	sort.Strings(ratelimit)
	if !slices.Equal(ratelimit, c.ratelimitReplicas()) {
		t.Errorf("job ratelimit-svc scrapes %v, the replicas are %v", ratelimit, c.ratelimitReplicas())
	}
}

func TestGrafanaProvisioning(t *testing.T) {
	c := loadCompose(t)
	g := c.Services["grafana"]
	prov := mountTarget(g, "./deploy/grafana/provisioning")
	dash := mountTarget(g, "./deploy/grafana/ratelimit.json")
	if prov != "/etc/grafana/provisioning" || dash == "" {
		t.Fatalf("grafana mounts provisioning at %q and the dashboard at %q", prov, dash)
	}
	var ds struct {
		Datasources []struct {
			Type string `yaml:"type"`
			URL  string `yaml:"url"`
		} `yaml:"datasources"`
	}
	if err := yaml.Unmarshal(readFile(t, "deploy/grafana/provisioning/datasources/prometheus.yml"), &ds); err != nil {
		t.Fatal(err)
	}
	if len(ds.Datasources) != 1 || ds.Datasources[0].Type != "prometheus" {
		t.Fatalf("datasources %+v", ds.Datasources)
	}
	host, port := splitHostPort(strings.TrimPrefix(ds.Datasources[0].URL, "http://"))
	if !slices.Contains(c.listenPorts(t, host), port) {
		t.Errorf("datasource %s is not the prometheus service", ds.Datasources[0].URL)
	}
	var dp struct {
		Providers []struct {
			Type    string `yaml:"type"`
			Options struct {
				Path string `yaml:"path"`
			} `yaml:"options"`
		} `yaml:"providers"`
	}
	if err := yaml.Unmarshal(readFile(t, "deploy/grafana/provisioning/dashboards/ratelimit.yml"), &dp); err != nil {
		t.Fatal(err)
	}
	if len(dp.Providers) != 1 || dp.Providers[0].Type != "file" || dp.Providers[0].Options.Path+"/ratelimit.json" != dash {
		t.Errorf("dashboard provider %+v does not read %s", dp.Providers, dash)
	}
	if home := g.Environment["GF_DASHBOARDS_DEFAULT_HOME_DASHBOARD_PATH"]; home != "" && home != dash {
		t.Errorf("home dashboard %q is not the mounted %q", home, dash)
	}
}
