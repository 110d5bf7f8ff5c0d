package deploy_test

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"

	"gopkg.in/yaml.v3"

	"github.com/ratelimit-svc/ratelimit-svc/pkg/policy"
)

// k8sDir holds the plain Kubernetes install.
const k8sDir = "envoy/k8s"

type meta struct {
	Name        string            `yaml:"name"`
	Namespace   string            `yaml:"namespace"`
	Labels      map[string]string `yaml:"labels"`
	Annotations map[string]string `yaml:"annotations"`
}

// object is any Kubernetes object; Spec is decoded by kind.
type object struct {
	APIVersion string            `yaml:"apiVersion"`
	Kind       string            `yaml:"kind"`
	Metadata   meta              `yaml:"metadata"`
	Spec       yaml.Node         `yaml:"spec"`
	Data       map[string]string `yaml:"data"`
	file       string
}

type labelSelector struct {
	MatchLabels map[string]string `yaml:"matchLabels"`
}

type deploymentSpec struct {
	Replicas int           `yaml:"replicas"`
	Selector labelSelector `yaml:"selector"`
	Template struct {
		Metadata meta    `yaml:"metadata"`
		Spec     podSpec `yaml:"spec"`
	} `yaml:"template"`
}

type podSpec struct {
	TerminationGracePeriodSeconds *int `yaml:"terminationGracePeriodSeconds"`
	SecurityContext               struct {
		RunAsNonRoot *bool  `yaml:"runAsNonRoot"`
		RunAsUser    *int64 `yaml:"runAsUser"`
	} `yaml:"securityContext"`
	Containers []container `yaml:"containers"`
	Volumes    []struct {
		Name      string `yaml:"name"`
		ConfigMap *struct {
			Name string `yaml:"name"`
		} `yaml:"configMap"`
	} `yaml:"volumes"`
}

type container struct {
	Name  string `yaml:"name"`
	Image string `yaml:"image"`
	Ports []struct {
		Name          string `yaml:"name"`
		ContainerPort int    `yaml:"containerPort"`
	} `yaml:"ports"`
	Env []struct {
		Name      string `yaml:"name"`
		Value     string `yaml:"value"`
		ValueFrom *struct {
			FieldRef *struct {
				FieldPath string `yaml:"fieldPath"`
			} `yaml:"fieldRef"`
			ResourceFieldRef *struct {
				Resource string `yaml:"resource"`
			} `yaml:"resourceFieldRef"`
		} `yaml:"valueFrom"`
	} `yaml:"env"`
	ReadinessProbe *probe `yaml:"readinessProbe"`
	LivenessProbe  *probe `yaml:"livenessProbe"`
	Lifecycle      *struct {
		PreStop *struct {
			Sleep *struct {
				Seconds int `yaml:"seconds"`
			} `yaml:"sleep"`
		} `yaml:"preStop"`
	} `yaml:"lifecycle"`
	Resources struct {
		Requests map[string]string `yaml:"requests"`
		Limits   map[string]string `yaml:"limits"`
	} `yaml:"resources"`
	SecurityContext *struct {
		AllowPrivilegeEscalation *bool `yaml:"allowPrivilegeEscalation"`
		ReadOnlyRootFilesystem   *bool `yaml:"readOnlyRootFilesystem"`
		RunAsNonRoot             *bool `yaml:"runAsNonRoot"`
		Capabilities             *struct {
			Drop []string `yaml:"drop"`
		} `yaml:"capabilities"`
	} `yaml:"securityContext"`
	VolumeMounts []struct {
		Name      string `yaml:"name"`
		MountPath string `yaml:"mountPath"`
		ReadOnly  bool   `yaml:"readOnly"`
		SubPath   string `yaml:"subPath"`
	} `yaml:"volumeMounts"`
}

type probe struct {
	GRPC *struct {
		Port    int     `yaml:"port"`
		Service *string `yaml:"service"`
	} `yaml:"grpc"`
	TCPSocket *struct {
		Port any `yaml:"port"`
	} `yaml:"tcpSocket"`
	HTTPGet *struct {
		Port any `yaml:"port"`
	} `yaml:"httpGet"`
}

type serviceSpec struct {
	ClusterIP string            `yaml:"clusterIP"`
	Selector  map[string]string `yaml:"selector"`
	Ports     []struct {
		Name        string `yaml:"name"`
		Port        int    `yaml:"port"`
		TargetPort  any    `yaml:"targetPort"`
		Protocol    string `yaml:"protocol"`
		AppProtocol string `yaml:"appProtocol"`
	} `yaml:"ports"`
}

type pdbSpec struct {
	MinAvailable   any           `yaml:"minAvailable"`
	MaxUnavailable any           `yaml:"maxUnavailable"`
	Selector       labelSelector `yaml:"selector"`
}

// apiVersions are the versions this repository's manifests use, by kind.
var apiVersions = map[string]string{
	"Namespace":           "v1",
	"ConfigMap":           "v1",
	"Service":             "v1",
	"Deployment":          "apps/v1",
	"PodDisruptionBudget": "policy/v1",
	"Gateway":             "networking.istio.io/v1",
	"VirtualService":      "networking.istio.io/v1",
	"ServiceEntry":        "networking.istio.io/v1",
	"DestinationRule":     "networking.istio.io/v1",
	"EnvoyFilter":         "networking.istio.io/v1alpha3",
}

var dns1123 = regexp.MustCompile(`^[a-z0-9]([-a-z0-9]*[a-z0-9])?$`)

// loadObjects decodes every manifest of a kustomization directory: the
// files its kustomization.yaml lists, which must be all the YAML files
// there.
func loadObjects(t *testing.T, dir string) []*object {
	t.Helper()
	var k struct {
		APIVersion string   `yaml:"apiVersion"`
		Kind       string   `yaml:"kind"`
		Resources  []string `yaml:"resources"`
	}
	if err := yaml.Unmarshal(readFile(t, dir, "kustomization.yaml"), &k); err != nil {
		t.Fatalf("%s/kustomization.yaml: %v", dir, err)
	}
	if k.Kind != "Kustomization" || k.APIVersion != "kustomize.config.k8s.io/v1beta1" {
		t.Errorf("%s/kustomization.yaml: %s %s", dir, k.APIVersion, k.Kind)
	}
	listed := map[string]bool{}
	for _, r := range k.Resources {
		st, err := os.Stat(repoPath(dir, r))
		if err != nil {
			t.Errorf("%s/kustomization.yaml lists %s: %v", dir, r, err)
			continue
		}
		if st.IsDir() {
			if _, err := os.Stat(repoPath(dir, r, "kustomization.yaml")); err != nil {
				t.Errorf("%s/kustomization.yaml lists directory %s without a kustomization", dir, r)
			}
			continue
		}
		listed[r] = true
	}
	files, _ := filepath.Glob(repoPath(dir, "*.yaml"))
	var objs []*object
	for _, f := range files {
		name := filepath.Base(f)
		if name == "kustomization.yaml" {
			continue
		}
		if !listed[name] {
			t.Errorf("%s/%s is not in kustomization.yaml", dir, name)
		}
		for i, doc := range decodeYAMLDocs(t, name, readFile(t, dir, name)) {
			var o object
			if err := doc.Decode(&o); err != nil {
				t.Fatalf("%s/%s document %d: %v", dir, name, i, err)
			}
			o.file = dir + "/" + name
			if want, ok := apiVersions[o.Kind]; !ok || o.APIVersion != want {
				t.Errorf("%s: %s %q: apiVersion %q, want %q", o.file, o.Kind, o.Metadata.Name, o.APIVersion, want)
			}
			if !dns1123.MatchString(o.Metadata.Name) {
				t.Errorf("%s: %s name %q is not a DNS label", o.file, o.Kind, o.Metadata.Name)
			}
			objs = append(objs, &o)
		}
	}
	return objs
}

func find(objs []*object, kind, name string) *object {
	for _, o := range objs {
		if o.Kind == kind && o.Metadata.Name == name {
			return o
		}
	}
	return nil
}

func spec[T any](t *testing.T, o *object) *T {
	t.Helper()
	var s T
	if err := o.Spec.Decode(&s); err != nil {
		t.Fatalf("%s: %s %s spec: %v", o.file, o.Kind, o.Metadata.Name, err)
	}
	return &s
}

func mustFind(t *testing.T, objs []*object, kind, name string) *object {
	t.Helper()
	o := find(objs, kind, name)
	if o == nil {
		t.Fatalf("no %s %q", kind, name)
	}
	return o
}

// serviceEnv lists the environment variables the service reads, and the
// Go runtime's.
var serviceEnv = []string{"RLS_CONFIG", "RLS_GRPC_ADDR", "RLS_HTTP_ADDR", "REDIS_URL", "RLS_SERVICE",
	"POD_NAME", "HOSTNAME", "LOG_LEVEL", "LOG_FORMAT", "RLS_SHUTDOWN_TIMEOUT", "RLS_RESPONSE_HEADERS",
	"GOMEMLIMIT", "GOMAXPROCS"}

func TestK8sObjects(t *testing.T) {
	objs := loadObjects(t, k8sDir)
	ns := mustFind(t, objs, "Namespace", "ratelimit")
	kinds := map[string]int{}
	for _, o := range objs {
		kinds[o.Kind]++
		if o.Kind != "Namespace" && o.Metadata.Namespace != ns.Metadata.Name {
			t.Errorf("%s: %s %s in namespace %q, want %q", o.file, o.Kind, o.Metadata.Name, o.Metadata.Namespace, ns.Metadata.Name)
		}
	}
	for kind, n := range map[string]int{"Deployment": 2, "Service": 2, "ConfigMap": 1, "PodDisruptionBudget": 1} {
		if kinds[kind] != n {
			t.Errorf("%d %s, want %d", kinds[kind], kind, n)
		}
	}
}

func TestK8sDeployment(t *testing.T) {
	objs := loadObjects(t, k8sDir)
	d := spec[deploymentSpec](t, mustFind(t, objs, "Deployment", "ratelimit-svc"))
	if d.Replicas < 2 {
		t.Errorf("replicas %d, want ≥ 2", d.Replicas)
	}
	if !selects(d.Selector.MatchLabels, d.Template.Metadata.Labels) {
		t.Errorf("selector %v does not select the pod labels %v", d.Selector.MatchLabels, d.Template.Metadata.Labels)
	}
	pod := d.Template.Spec
	if len(pod.Containers) != 1 {
		t.Fatalf("%d containers", len(pod.Containers))
	}
	c := pod.Containers[0]

	ports := map[string]int{}
	for _, p := range c.Ports {
		ports[p.Name] = p.ContainerPort
	}
	if ports["grpc"] != 8081 || ports["http-metrics"] != 8080 {
		t.Errorf("container ports %v, want grpc 8081 and http-metrics 8080", ports)
	}
	for name, p := range map[string]*probe{"readiness": c.ReadinessProbe, "liveness": c.LivenessProbe} {
		if p == nil || p.GRPC == nil {
			t.Errorf("%s probe is not a gRPC probe", name)
			continue
		}
		if p.GRPC.Port != 8081 || p.GRPC.Service == nil || *p.GRPC.Service != "ratelimit" {
			t.Errorf("%s probe: port %d service %v, want 8081 and \"ratelimit\"", name, p.GRPC.Port, p.GRPC.Service)
		}
	}

	env := map[string]string{}
	for _, e := range c.Env {
		if !slices.Contains(serviceEnv, e.Name) {
			t.Errorf("env %s: the service does not read it", e.Name)
		}
		if _, dup := env[e.Name]; dup {
			t.Errorf("env %s set twice", e.Name)
		}
		env[e.Name] = e.Value
		if e.Name == "POD_NAME" {
			if e.ValueFrom == nil || e.ValueFrom.FieldRef == nil || e.ValueFrom.FieldRef.FieldPath != "metadata.name" {
				t.Error("POD_NAME is not the pod name from the downward API")
			}
		}
	}
	if _, ok := env["POD_NAME"]; !ok {
		t.Error("no POD_NAME")
	}

	// REDIS_URL names the Redis Service of the install.
	host, port := splitHostPort(strings.TrimPrefix(env["REDIS_URL"], "redis://"))
	if !strings.HasPrefix(env["REDIS_URL"], "redis://") {
		t.Errorf("REDIS_URL %q", env["REDIS_URL"])
	}
	redis := find(objs, "Service", strings.Split(host, ".")[0])
	if redis == nil {
		t.Errorf("REDIS_URL host %q is no Service of the install", host)
	} else if rs := spec[serviceSpec](t, redis); len(rs.Ports) == 0 || strconv.Itoa(rs.Ports[0].Port) != port {
		t.Errorf("REDIS_URL port %q, Service %s ports %v", port, redis.Metadata.Name, rs.Ports)
	}

	// The policies: a ConfigMap volume mounted whole at RLS_CONFIG.
	var mount string
	for _, m := range c.VolumeMounts {
		for _, v := range pod.Volumes {
			if v.Name != m.Name || v.ConfigMap == nil {
				continue
			}
			mount = m.MountPath
			if m.SubPath != "" {
				t.Errorf("ConfigMap mounted with subPath: edits would never reach the pod")
			}
			if !m.ReadOnly {
				t.Error("ConfigMap mount is not read-only")
			}
			if find(objs, "ConfigMap", v.ConfigMap.Name) == nil {
				t.Errorf("volume %s: no ConfigMap %q", v.Name, v.ConfigMap.Name)
			}
		}
	}
	if mount != "/etc/ratelimit/config" || env["RLS_CONFIG"] != mount {
		t.Errorf("ConfigMap mounted at %q, RLS_CONFIG %q, want both /etc/ratelimit/config", mount, env["RLS_CONFIG"])
	}
	if cfg := dockerEntrypointConfig(t); cfg != mount {
		t.Errorf("the image's entrypoint reads --config %q, the ConfigMap is at %q", cfg, mount)
	}

	// Draining fits in the grace period.
	shutdown := 15 * time.Second
	if v, ok := env["RLS_SHUTDOWN_TIMEOUT"]; ok {
		var err error
		if shutdown, err = time.ParseDuration(v); err != nil {
			t.Errorf("RLS_SHUTDOWN_TIMEOUT: %v", err)
		}
	}
	preStop := 0
	if c.Lifecycle != nil && c.Lifecycle.PreStop != nil && c.Lifecycle.PreStop.Sleep != nil {
		preStop = c.Lifecycle.PreStop.Sleep.Seconds
	}
	if g := pod.TerminationGracePeriodSeconds; g == nil ||
		time.Duration(*g)*time.Second <= shutdown+time.Duration(preStop)*time.Second {
		t.Errorf("terminationGracePeriodSeconds %v must exceed preStop %ds + shutdown timeout %v", g, preStop, shutdown)
	}

	checkResources(t, "ratelimit-svc", c)
	checkNonRoot(t, "ratelimit-svc", pod, c)
	if u := pod.SecurityContext.RunAsUser; u == nil || *u != dockerUser(t) {
		t.Errorf("runAsUser %v, the image's USER is %d", u, dockerUser(t))
	}
}

func checkResources(t *testing.T, what string, c container) {
	t.Helper()
	for _, r := range []string{"cpu", "memory"} {
		req, err1 := quantity(c.Resources.Requests[r])
		lim, err2 := quantity(c.Resources.Limits[r])
		if err1 != nil || err2 != nil {
			t.Errorf("%s: %s request %q limit %q: %v %v", what, r, c.Resources.Requests[r], c.Resources.Limits[r], err1, err2)
			continue
		}
		if req <= 0 || req > lim {
			t.Errorf("%s: %s request %v above limit %v", what, r, req, lim)
		}
	}
}

func checkNonRoot(t *testing.T, what string, pod podSpec, c container) {
	t.Helper()
	nonRoot := pod.SecurityContext.RunAsNonRoot != nil && *pod.SecurityContext.RunAsNonRoot
	if sc := c.SecurityContext; sc != nil && sc.RunAsNonRoot != nil {
		nonRoot = *sc.RunAsNonRoot
	}
	if !nonRoot {
		t.Errorf("%s: runAsNonRoot not set", what)
	}
	if u := pod.SecurityContext.RunAsUser; u != nil && *u == 0 {
		t.Errorf("%s: runs as root", what)
	}
	sc := c.SecurityContext
	if sc == nil || sc.AllowPrivilegeEscalation == nil || *sc.AllowPrivilegeEscalation ||
		sc.ReadOnlyRootFilesystem == nil || !*sc.ReadOnlyRootFilesystem ||
		sc.Capabilities == nil || !slices.Contains(sc.Capabilities.Drop, "ALL") {
		t.Errorf("%s: container securityContext must forbid privilege escalation, make the root read-only and drop ALL", what)
	}
}

// quantity parses the Kubernetes quantities the manifests use: plain or
// milli numbers, binary (Ki, Mi, Gi) and decimal (k, M, G) suffixes.
func quantity(s string) (float64, error) {
	mult := 1.0
	for _, u := range []struct {
		suffix string
		m      float64
	}{{"Ki", 1 << 10}, {"Mi", 1 << 20}, {"Gi", 1 << 30}, {"m", 1e-3}, {"k", 1e3}, {"M", 1e6}, {"G", 1e9}} {
		if strings.HasSuffix(s, u.suffix) {
			s, mult = strings.TrimSuffix(s, u.suffix), u.m
			break
		}
	}
	v, err := strconv.ParseFloat(s, 64)
	if err != nil {
		return 0, fmt.Errorf("quantity %q", s)
	}
	return v * mult, nil
}

// targetPortOK says whether a Service targetPort names or numbers a port
// of the container.
func targetPortOK(tp any, c container, port int) bool {
	if tp == nil {
		tp = port
	}
	for _, p := range c.Ports {
		switch v := tp.(type) {
		case int:
			if p.ContainerPort == v {
				return true
			}
		case string:
			if p.Name == v {
				return true
			}
		}
	}
	return false
}

func TestK8sServices(t *testing.T) {
	objs := loadObjects(t, k8sDir)
	for _, name := range []string{"ratelimit-svc", "redis"} {
		svc := spec[serviceSpec](t, mustFind(t, objs, "Service", name))
		dep := spec[deploymentSpec](t, mustFind(t, objs, "Deployment", name))
		if !selects(svc.Selector, dep.Template.Metadata.Labels) {
			t.Errorf("Service %s selector %v does not select Deployment %s's pods %v", name, svc.Selector, name, dep.Template.Metadata.Labels)
		}
		for _, p := range svc.Ports {
			if p.Name == "" {
				t.Errorf("Service %s port %d has no name", name, p.Port)
			}
			if !targetPortOK(p.TargetPort, dep.Template.Spec.Containers[0], p.Port) {
				t.Errorf("Service %s port %s: targetPort %v is no container port", name, p.Name, p.TargetPort)
			}
		}
		if name == "redis" {
			checkResources(t, "redis", dep.Template.Spec.Containers[0])
			checkNonRoot(t, "redis", dep.Template.Spec, dep.Template.Spec.Containers[0])
			continue
		}
		ports := map[int]string{}
		for _, p := range svc.Ports {
			ports[p.Port] = p.Name + "/" + p.AppProtocol
		}
		// grpc-named with appProtocol grpc: the mesh treats it as HTTP/2.
		if ports[8081] != "grpc/grpc" || !strings.HasPrefix(ports[8080], "http-metrics/") {
			t.Errorf("Service ratelimit-svc ports %v, want 8081 grpc/grpc and 8080 http-metrics", ports)
		}
		if svc.ClusterIP != "None" {
			t.Errorf("Service ratelimit-svc is not headless: STRICT_DNS would see one address")
		}
	}
}

func TestK8sPodDisruptionBudget(t *testing.T) {
	objs := loadObjects(t, k8sDir)
	pdb := spec[pdbSpec](t, mustFind(t, objs, "PodDisruptionBudget", "ratelimit-svc"))
	dep := spec[deploymentSpec](t, mustFind(t, objs, "Deployment", "ratelimit-svc"))
	if !selects(pdb.Selector.MatchLabels, dep.Template.Metadata.Labels) {
		t.Errorf("PDB selector %v does not select the Deployment's pods %v", pdb.Selector.MatchLabels, dep.Template.Metadata.Labels)
	}
	minAvail, ok := pdb.MinAvailable.(int)
	if !ok || minAvail < 1 || minAvail >= dep.Replicas || pdb.MaxUnavailable != nil {
		t.Errorf("PDB minAvailable %v with %d replicas: want 1 ≤ minAvailable < replicas", pdb.MinAvailable, dep.Replicas)
	}
}

// configMapPolicies compiles the policies of the install's ConfigMap, as
// the service reads them from the mounted directory.
func configMapPolicies(t *testing.T) *policy.Snapshot {
	t.Helper()
	cm := mustFind(t, loadObjects(t, k8sDir), "ConfigMap", "ratelimit-config")
	var files []policy.File
	for k, v := range cm.Data {
		if !strings.HasSuffix(k, ".yaml") && !strings.HasSuffix(k, ".yml") {
			t.Errorf("ConfigMap key %q: the service reads only *.yaml and *.yml", k)
		}
		files = append(files, policy.File{Name: "/etc/ratelimit/config/" + k, Data: []byte(v)})
	}
	return compileClean(t, "ConfigMap ratelimit-config", files)
}

// TestK8sConfigMapPolicies checks that the ConfigMap's policies load
// without a problem and carry the domains and targets of config/.
func TestK8sConfigMapPolicies(t *testing.T) {
	got := configMapPolicies(t)
	want := compileClean(t, "config/", policyFiles(t, "config", "config/"))
	gd, wd := got.Domains(), want.Domains()
	sort.Strings(gd)
	sort.Strings(wd)
	if !slices.Equal(gd, wd) {
		t.Errorf("ConfigMap domains %v, config/ has %v", gd, wd)
	}
	if g, w := targetNames(got), targetNames(want); !slices.Equal(g, w) {
		t.Errorf("ConfigMap targets %v, config/ has %v", g, w)
	}
	for _, w := range want.Targets() {
		if g := got.Target(w.Name); g != nil && targetFacts(g) != targetFacts(w) {
			t.Errorf("ConfigMap target %s:\n%s\nconfig/ has:\n%s", w.Name, targetFacts(g), targetFacts(w))
		}
	}
}

// targetFacts is everything a compiled target says but the file it came
// from, as text to compare.
func targetFacts(tg *policy.Target) string {
	c := *tg
	c.File = ""
	b, err := json.Marshal(c)
	if err != nil {
		return err.Error()
	}
	return fmt.Sprintf("%s rate %+v tokens %+v", b, c.RateLimit, c.TokenLimit)
}
