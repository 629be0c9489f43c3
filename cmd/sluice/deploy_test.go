package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	ratelimitv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"go.yaml.in/yaml/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/sluicehq/sluice/internal/redistest"
	"github.com/sluicehq/sluice/server"
)

// dockerfile is what the tests read of the repository's Dockerfile.
type dockerfile struct {
	env        map[string]string
	expose     []int
	entrypoint []string
	cmd        []string
	runs       []string
	copies     [][]string // each COPY's words, flags included
}

// readDockerfile reads the Dockerfile at the repository's root: its ENV,
// EXPOSE, ENTRYPOINT, CMD, RUN and COPY instructions, lines joined where
// they end in a backslash.
func readDockerfile(t *testing.T) dockerfile {
	t.Helper()
	data, err := os.ReadFile("../../Dockerfile")
	if err != nil {
		t.Fatal(err)
	}
	d := dockerfile{env: map[string]string{}}
	var lines []string
	cur := ""
	sc := bufio.NewScanner(bytes.NewReader(data))
	for sc.Scan() {
		line := strings.TrimSpace(sc.Text())
		if strings.HasPrefix(line, "#") {
			continue
		}
		if cont, ok := strings.CutSuffix(line, `\`); ok {
			cur += cont + " "
			continue
		}
		lines = append(lines, cur+line)
		cur = ""
	}
	for _, line := range lines {
		instr, rest, _ := strings.Cut(line, " ")
		switch strings.ToUpper(instr) {
		case "ENV":
			for _, kv := range strings.Fields(rest) {
				k, v, ok := strings.Cut(kv, "=")
				if !ok {
					t.Fatalf("Dockerfile: ENV %q: want KEY=VALUE", kv)
				}
				d.env[k] = v
			}
		case "EXPOSE":
			for _, p := range strings.Fields(rest) {
				n, err := strconv.Atoi(p)
				if err != nil {
					t.Fatalf("Dockerfile: EXPOSE %q", p)
				}
				d.expose = append(d.expose, n)
			}
		case "ENTRYPOINT", "CMD":
			var args []string
			if err := json.Unmarshal([]byte(rest), &args); err != nil {
				t.Fatalf("Dockerfile: %s %s: want the exec form, a JSON array: %v", instr, rest, err)
			}
			if instr == "CMD" {
				d.cmd = args
			} else {
				d.entrypoint = args
			}
		case "RUN":
			d.runs = append(d.runs, rest)
		case "COPY":
			d.copies = append(d.copies, strings.Fields(rest))
		}
	}
	return d
}

// port returns the port of a listen address, or 0 for "off".
func port(t *testing.T, addr string) int {
	t.Helper()
	if addr == "off" {
		return 0
	}
	_, p, err := net.SplitHostPort(addr)
	if err != nil {
		t.Fatalf("listen address %q: %v", addr, err)
	}
	n, _ := strconv.Atoi(p)
	return n
}

// The image runs `sluice serve` with every listener on every interface
// (the binary's defaults are loopback, which no one outside the container
// reaches), exposes exactly those ports, and builds a static binary, as
// its distroless base has no C library. The image itself is not built
// here (no container engine); what it runs is.
func TestDockerfile(t *testing.T) {
	d := readDockerfile(t)
	if !slices.Equal(d.entrypoint, []string{"/sluice"}) || !slices.Equal(d.cmd, []string{"serve"}) {
		t.Errorf("ENTRYPOINT %q CMD %q, want [/sluice] [serve]", d.entrypoint, d.cmd)
	}
	f, err := parseServeFlags(nil, func(k string) string { return d.env[k] }, io.Discard)
	if err != nil {
		t.Fatalf("sluice serve with the image's environment: %v", err)
	}
	var ports []int
	for _, addr := range []string{f.o.Listen, f.o.CheckListen, f.o.GRPCListen, f.o.AdminListen} {
		if host, _, _ := net.SplitHostPort(addr); host != "0.0.0.0" && host != "" {
			t.Errorf("listener %s: want every interface in a container", addr)
		}
		ports = append(ports, port(t, addr))
	}
	if slices.Sort(ports); !slices.Equal(ports, slices.Sorted(slices.Values(d.expose))) {
		t.Errorf("EXPOSE %v, want the listeners' ports %v", d.expose, ports)
	}
	built, out := false, ""
	for _, run := range d.runs {
		if strings.Contains(run, "go build") {
			built = strings.Contains(run, "CGO_ENABLED=0") && strings.Contains(run, "./cmd/sluice")
			f := strings.Fields(run)
			if i := slices.Index(f, "-o"); i >= 0 && i+1 < len(f) {
				out = f[i+1]
			}
		}
	}
	if !built || out == "" {
		t.Errorf("no RUN builds ./cmd/sluice with CGO_ENABLED=0 (a static binary, for a base with no C library) and -o: %q", d.runs)
	}
	// What the ENTRYPOINT runs is the binary built, copied from the build
	// stage.
	copied := false
	for _, c := range d.copies {
		n := len(c)
		copied = copied || n >= 3 && strings.HasPrefix(c[0], "--from=") && c[n-2] == out && c[n-1] == "/sluice"
	}
	if !copied {
		t.Errorf("no COPY --from puts the binary built (%s) at /sluice, which the ENTRYPOINT runs: %q", out, d.copies)
	}
}

// k8sObject is the part of a Kubernetes object the tests read.
type k8sObject struct {
	Kind     string
	Metadata struct{ Name, Namespace string }
	Data     map[string]string
	Spec     struct {
		// Selector is a Service's labels, or a Deployment's under
		// matchLabels: see selector.
		Selector yaml.Node
		Template struct {
			Metadata struct{ Labels map[string]string }
			Spec     struct {
				Containers []k8sContainer
				Volumes    []struct {
					Name      string
					ConfigMap struct{ Name string } `yaml:"configMap"`
				}
			}
		}
		Ports []struct {
			Name       string
			Port       int
			TargetPort string `yaml:"targetPort"`
		}
	}
}

type k8sContainer struct {
	Args []string
	Env  []struct{ Name, Value string }
	// Ports, probes and mounts name each other.
	Ports []struct {
		Name          string
		ContainerPort int `yaml:"containerPort"`
	}
	ReadinessProbe k8sProbe `yaml:"readinessProbe"`
	LivenessProbe  k8sProbe `yaml:"livenessProbe"`
	VolumeMounts   []struct {
		Name      string
		MountPath string `yaml:"mountPath"`
	} `yaml:"volumeMounts"`
}

type k8sProbe struct {
	HTTPGet struct {
		Path string
		Port string
	} `yaml:"httpGet"`
}

// selector returns the labels the selector of a Service or a Deployment
// names.
func (o k8sObject) selector(t *testing.T) map[string]string {
	t.Helper()
	var sel map[string]string
	if o.Kind == "Deployment" {
		var d struct {
			MatchLabels map[string]string `yaml:"matchLabels"`
		}
		if err := o.Spec.Selector.Decode(&d); err != nil {
			t.Fatalf("%s %s: selector: %v", o.Kind, o.Metadata.Name, err)
		}
		sel = d.MatchLabels
	} else if err := o.Spec.Selector.Decode(&sel); err != nil {
		t.Fatalf("%s %s: selector: %v", o.Kind, o.Metadata.Name, err)
	}
	return sel
}

// readK8s reads the objects of a Kubernetes manifest by kind.
func readK8s(t *testing.T, path string) map[string]k8sObject {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	objs := map[string]k8sObject{}
	dec := yaml.NewDecoder(bytes.NewReader(data))
	for {
		var o k8sObject
		if err := dec.Decode(&o); errors.Is(err, io.EOF) {
			break
		} else if err != nil {
			t.Fatalf("%s: %v", path, err)
		}
		objs[o.Kind] = o
	}
	return objs
}

// The Kubernetes example, read as Kubernetes would put it together (the
// image's environment, then the container's args and env, the ConfigMap
// mounted where --envoy-config looks), is a sluice that starts, becomes
// ready once Redis answers, and limits by the ConfigMap's rules; and the
// Service, probes and ports name what the container serves, the
// selectors select its pods, and all are in one namespace.
func TestKubernetesExample(t *testing.T) {
	objs := readK8s(t, "../../examples/kubernetes/ratelimit.yaml")
	cm, dep, svc := objs["ConfigMap"], objs["Deployment"], objs["Service"]
	if len(dep.Spec.Template.Spec.Containers) != 1 || len(cm.Data) == 0 || len(svc.Spec.Ports) == 0 {
		t.Fatalf("want a ConfigMap with data, a Deployment of one container and a Service: %+v", objs)
	}
	c := dep.Spec.Template.Spec.Containers[0]

	// One namespace: a pod mounts ConfigMaps of its own only, and a
	// Service sends to pods of its own. The Deployment's selector must
	// hold its pods (Kubernetes refuses it otherwise), and the Service's
	// too, or it sends nowhere.
	if ns := dep.Metadata.Namespace; cm.Metadata.Namespace != ns || svc.Metadata.Namespace != ns {
		t.Errorf("namespaces: ConfigMap %q, Deployment %q, Service %q, want one", cm.Metadata.Namespace, ns, svc.Metadata.Namespace)
	}
	pod := dep.Spec.Template.Metadata.Labels
	for _, o := range []k8sObject{dep, svc} {
		sel := o.selector(t)
		selects := len(sel) > 0
		for k, v := range sel {
			selects = selects && pod[k] == v
		}
		if !selects {
			t.Errorf("%s %s: selector %v does not select the pods, labelled %v", o.Kind, o.Metadata.Name, sel, pod)
		}
	}

	env := readDockerfile(t).env
	for _, e := range c.Env {
		env[e.Name] = e.Value
	}
	if len(c.Args) == 0 || c.Args[0] != "serve" {
		t.Fatalf("args %q: want serve and its flags", c.Args)
	}
	f, err := parseServeFlags(c.Args[1:], func(k string) string { return env[k] }, io.Discard)
	if err != nil {
		t.Fatalf("sluice %q with the image's and the container's environment: %v", c.Args, err)
	}
	if len(f.o.EnvoyConfigs) != 1 || f.o.RedisURL == "" {
		t.Fatalf("options %+v: want one --envoy-config and a Redis", f.o)
	}

	// The ConfigMap is mounted where --envoy-config reads.
	mounted := ""
	for _, m := range c.VolumeMounts {
		for _, v := range dep.Spec.Template.Spec.Volumes {
			if v.Name == m.Name && v.ConfigMap.Name == cm.Metadata.Name {
				mounted = m.MountPath
			}
		}
	}
	if mounted != f.o.EnvoyConfigs[0] {
		t.Errorf("ConfigMap %s mounted at %q, but --envoy-config reads %q", cm.Metadata.Name, mounted, f.o.EnvoyConfigs[0])
	}

	// Ports: the container's are the listeners', the probes and the
	// Service name them, and the Service answers where the reference's
	// does (8081, gRPC).
	named := map[string]int{}
	for _, p := range c.Ports {
		named[p.Name] = p.ContainerPort
	}
	if named["grpc"] != port(t, f.o.GRPCListen) || named["admin"] != port(t, f.o.AdminListen) {
		t.Errorf("container ports %v, want grpc on %s and admin on %s", named, f.o.GRPCListen, f.o.AdminListen)
	}
	for name, p := range map[string]k8sProbe{"readiness": c.ReadinessProbe, "liveness": c.LivenessProbe} {
		if named[p.HTTPGet.Port] != named["admin"] || p.HTTPGet.Path != map[string]string{"readiness": "/readyz", "liveness": "/healthz"}[name] {
			t.Errorf("%s probe %+v: want the admin port's /readyz or /healthz", name, p.HTTPGet)
		}
	}
	grpcPort := false
	for _, p := range svc.Spec.Ports {
		if _, ok := named[p.TargetPort]; !ok {
			t.Errorf("Service port %s targets %q, which the container does not name", p.Name, p.TargetPort)
		}
		if p.Name == "grpc" && (p.Port != 8081 || p.TargetPort != "grpc") {
			t.Errorf("Service port grpc: %d → %s, want the reference's 8081 → grpc", p.Port, p.TargetPort)
		}
		grpcPort = grpcPort || p.Port == 8081 && p.TargetPort == "grpc"
	}
	if svc.Metadata.Name != "ratelimit" || !grpcPort {
		t.Errorf("Service %s, ports %+v: want the reference's ratelimit:8081, sent to the container's grpc port", svc.Metadata.Name, svc.Spec.Ports)
	}

	// The ConfigMap as the pod sees it: its keys, files in one directory.
	dir := t.TempDir()
	for name, content := range cm.Data {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := server.LoadEnvoy(dir); err != nil {
		t.Fatalf("the ConfigMap's configuration: %v", err)
	}

	// And run it: the container's args, with the mount and Redis as they
	// are here and the listeners on free loopback ports.
	rs := redistest.Start(t)
	args := slices.Clone(c.Args[1:])
	for i := range args {
		if args[i] == f.o.EnvoyConfigs[0] {
			args[i] = dir
		}
	}
	p := startSluice(t, []string{"grpc", "admin"}, append(args, "--redis", "redis://"+rs.Addr()+"/0")...)
	if code, body := httpGet(t, "http://"+p.addrs["admin"]+"/readyz"); code != 200 {
		t.Fatalf("/readyz: %d %s", code, body)
	}
	conn, err := grpc.NewClient(p.addrs["grpc"], grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	client := rlsv3.NewRateLimitServiceClient(conn)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	ask := func(key, value string, hits uint32) *rlsv3.RateLimitResponse {
		t.Helper()
		resp, err := client.ShouldRateLimit(ctx, &rlsv3.RateLimitRequest{Domain: "edge", HitsAddend: hits, Descriptors: []*ratelimitv3.RateLimitDescriptor{{
			Entries: []*ratelimitv3.RateLimitDescriptor_Entry{{Key: key, Value: value}},
		}}})
		if err != nil {
			t.Fatal(err)
		}
		return resp
	}
	if r := ask("api_key", "k1", 600); r.OverallCode != rlsv3.RateLimitResponse_OK || r.Statuses[0].CurrentLimit.GetRequestsPerUnit() != 600 {
		t.Errorf("600 hits of an API key: %v, want OK under 600 a minute", r)
	}
	if r := ask("api_key", "k1", 1); r.OverallCode != rlsv3.RateLimitResponse_OVER_LIMIT {
		t.Errorf("the 601st hit of an API key: %v, want OVER_LIMIT", r)
	}
	if r := ask("api_key", "partner-7f3a", 601); r.OverallCode != rlsv3.RateLimitResponse_OK || r.Statuses[0].CurrentLimit.GetRequestsPerUnit() != 6000 {
		t.Errorf("601 hits of the partner's key: %v, want OK under 6000 a minute", r)
	}
}
