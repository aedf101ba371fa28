package deploy

import (
	"context"
	"encoding/base64"
	"fmt"
	"net"
	"os"
	"os/exec"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/util/intstr"
)

const (
	basePath    = "kubernetes/base"
	examplePath = "kubernetes/overlays/example"
	routerName  = "prefixring" // the router's Deployment and container
	vllmName    = "vllm"       // vLLM's Deployment and container
)

func TestKustomizeBase(t *testing.T) {
	m := kustomize(t, basePath)
	// The base carries no namespace and no gossip key: overlays do.
	want := map[string]int{"Deployment": 2, "Service": 4, "PodDisruptionBudget": 1, "ServiceMonitor": 2, "ServiceAccount": 1}
	got := map[string]int{"Deployment": len(m.deployments), "Service": len(m.services), "PodDisruptionBudget": len(m.pdbs),
		"ServiceMonitor": len(m.monitors), "ServiceAccount": len(m.serviceAccounts), "Namespace": len(m.namespaces), "Secret": len(m.secrets)}
	for kind, n := range got {
		if n != want[kind] {
			t.Errorf("base has %d %s objects, want %d", n, kind, want[kind])
		}
	}
}

// serveArgs are the flags a router container passes to `prefixring serve`.
type serveArgs struct {
	set  map[string]string
	help serveHelp
}

// parseServeArgs reads `serve --flag=value --flag value --bool ...`; a
// flag that serve --help does not list is an error.
func parseServeArgs(h serveHelp, args []string) (serveArgs, error) {
	s := serveArgs{set: map[string]string{}, help: h}
	if len(args) == 0 || args[0] != "serve" {
		return s, fmt.Errorf("args %q do not start with the serve command", args)
	}
	for i := 1; i < len(args); i++ {
		a := args[i]
		if !strings.HasPrefix(a, "--") {
			return s, fmt.Errorf("%q: serve takes no positional arguments", a)
		}
		name, val, hasVal := strings.Cut(strings.TrimPrefix(a, "--"), "=")
		takesValue, ok := h.values[name]
		switch {
		case !ok:
			return s, fmt.Errorf("--%s is not a flag of prefixring serve (serve --help)", name)
		case takesValue && !hasVal:
			if i+1 == len(args) {
				return s, fmt.Errorf("--%s lacks its value", name)
			}
			i++
			val = args[i]
		case !takesValue && !hasVal:
			val = "true"
		}
		if _, dup := s.set[name]; dup {
			return s, fmt.Errorf("--%s given twice", name)
		}
		s.set[name] = val
	}
	return s, nil
}

// get returns a flag's value: as passed, or serve's default.
func (s serveArgs) get(name string) string {
	if v, ok := s.set[name]; ok {
		return v
	}
	return s.help.flags[name]
}

func (s serveArgs) duration(t *testing.T, name string) time.Duration {
	t.Helper()
	d, err := time.ParseDuration(s.get(name))
	if err != nil {
		t.Fatalf("--%s: %v", name, err)
	}
	return d
}

func TestParseServeArgs(t *testing.T) {
	h := readServeHelp(t)
	s, err := parseServeArgs(h, []string{"serve", "--listen=:1", "--pprof", "--admin-listen", ":2"})
	if err != nil {
		t.Fatal(err)
	}
	if s.get("listen") != ":1" || s.get("admin-listen") != ":2" || s.get("pprof") != "true" || s.get("drain-delay") != "5s" {
		t.Errorf("parsed %v", s.set)
	}
	for _, bad := range [][]string{
		{"serve", "--no-such-flag=1"}, {"serve", "--listen"}, {"serve", "--listen=:1", "--listen=:2"},
		{"sim", "--listen=:1"}, {"serve", "extra"},
	} {
		if _, err := parseServeArgs(h, bad); err == nil {
			t.Errorf("%q parsed without error", bad)
		}
	}
}

// cluster is the example overlay, built, with what the checks share.
type cluster struct {
	manifests
	help           serveHelp
	router, vllm   *appsv1.Deployment
	routerC, vllmC *corev1.Container
	args           serveArgs
}

func container(t *testing.T, d *appsv1.Deployment, name string) *corev1.Container {
	t.Helper()
	for i := range d.Spec.Template.Spec.Containers {
		if c := &d.Spec.Template.Spec.Containers[i]; c.Name == name {
			return c
		}
	}
	t.Fatalf("Deployment %s has no container %s", d.Name, name)
	return nil
}

func buildExample(t *testing.T) *cluster {
	t.Helper()
	c := &cluster{manifests: kustomize(t, examplePath), help: readServeHelp(t)}
	if c.router = c.deployments[routerName]; c.router == nil {
		t.Fatalf("no Deployment %s", routerName)
	}
	if c.vllm = c.deployments[vllmName]; c.vllm == nil {
		t.Fatalf("no Deployment %s", vllmName)
	}
	c.routerC, c.vllmC = container(t, c.router, routerName), container(t, c.vllm, vllmName)
	if len(c.routerC.Command) != 0 {
		t.Errorf("router command %q overrides the image's entrypoint", c.routerC.Command)
	}
	var err error
	if c.args, err = parseServeArgs(c.help, c.routerC.Args); err != nil {
		t.Fatal(err)
	}
	return c
}

// selects reports whether a Service's selector picks d's pods.
func selects(sel map[string]string, d *appsv1.Deployment) bool {
	return len(sel) > 0 && labels.SelectorFromSet(sel).Matches(labels.Set(d.Spec.Template.Labels))
}

// selected is the one Deployment whose pods svc selects.
func (c *cluster) selected(t *testing.T, svc *corev1.Service) *appsv1.Deployment {
	t.Helper()
	var out []*appsv1.Deployment
	for _, d := range c.deployments {
		if selects(svc.Spec.Selector, d) {
			out = append(out, d)
		}
	}
	if len(out) != 1 {
		t.Fatalf("Service %s selects the pods of %d Deployments, want 1", svc.Name, len(out))
	}
	return out[0]
}

// containerPort resolves a target (a port name or number) in a pod
// template to the container port it names.
func containerPort(d *appsv1.Deployment, target intstr.IntOrString, proto corev1.Protocol) (int32, bool) {
	if proto == "" {
		proto = corev1.ProtocolTCP
	}
	for _, c := range d.Spec.Template.Spec.Containers {
		for _, p := range c.Ports {
			pp := p.Protocol
			if pp == "" {
				pp = corev1.ProtocolTCP
			}
			if pp != proto {
				continue
			}
			if (target.Type == intstr.String && p.Name == target.StrVal) || (target.Type == intstr.Int && p.ContainerPort == target.IntVal) {
				return p.ContainerPort, true
			}
		}
	}
	return 0, false
}

func (c *cluster) flagPort(t *testing.T, flag string) int32 {
	t.Helper()
	var n int32
	if _, err := fmt.Sscan(port(t, c.args.get(flag)), &n); err != nil {
		t.Fatalf("--%s=%s: %v", flag, c.args.get(flag), err)
	}
	return n
}

func TestExampleOverlay(t *testing.T) {
	c := buildExample(t)
	t.Run("objects", c.checkObjects)
	t.Run("router flags and environment", c.checkRouterEnv)
	t.Run("router ports", c.checkRouterPorts)
	t.Run("router probes", c.checkRouterProbes)
	t.Run("drain", c.checkDrain)
	t.Run("hardening", c.checkHardening)
	t.Run("memory", c.checkMemory)
	t.Run("replicas and spread", c.checkSpread)
	t.Run("services", c.checkServices)
	t.Run("admin port", c.checkAdminPort)
	t.Run("gossip join", c.checkJoin)
	t.Run("vllm discovery", c.checkDiscovery)
	t.Run("pdb", c.checkPDB)
	t.Run("service monitors", c.checkMonitors)
	t.Run("secrets", c.checkSecrets)
}

func (c *cluster) checkObjects(t *testing.T) {
	if len(c.namespaces) != 1 {
		t.Fatalf("%d Namespaces, want 1", len(c.namespaces))
	}
	var ns string
	for ns = range c.namespaces {
	}
	metas := []metav1.Object{}
	for _, o := range c.serviceAccounts {
		metas = append(metas, o)
	}
	for _, o := range c.deployments {
		metas = append(metas, o)
	}
	for _, o := range c.services {
		metas = append(metas, o)
	}
	for _, o := range c.secrets {
		metas = append(metas, o)
	}
	for _, o := range c.pdbs {
		metas = append(metas, o)
	}
	for _, o := range c.monitors {
		metas = append(metas, o)
	}
	if len(metas)+1 != c.count {
		t.Errorf("%d objects decoded, %d built", len(metas)+1, c.count)
	}
	for _, o := range metas {
		if o.GetNamespace() != ns {
			t.Errorf("%s is in namespace %q, want %q", o.GetName(), o.GetNamespace(), ns)
		}
	}
	if n := len(c.secrets); n != 1 {
		t.Errorf("%d Secrets, want the gossip key's", n)
	}
	if img := c.routerC.Image; !strings.Contains(img, "/") || !strings.Contains(img, ":") {
		t.Errorf("router image %q: want a registry path with a tag (the overlay's images:)", img)
	}
	if img := c.vllmC.Image; !strings.Contains(img, ":") || strings.HasSuffix(img, ":latest") {
		t.Errorf("vLLM image %q: want a pinned tag", img)
	}
}

// checkRouterEnv: PREFIXRING_ variables name serve's flags, none of them a
// flag also passed as an argument (the argument would silently win).
func (c *cluster) checkRouterEnv(t *testing.T) {
	seen := 0
	for _, e := range c.routerC.Env {
		if !strings.HasPrefix(e.Name, "PREFIXRING_") {
			continue
		}
		seen++
		flag, ok := c.help.envFlags[e.Name]
		if !ok {
			t.Errorf("env %s is no flag's variable in serve --help", e.Name)
			continue
		}
		if _, both := c.args.set[flag]; both {
			t.Errorf("--%s is set both by argument and by %s", flag, e.Name)
		}
	}
	if seen == 0 {
		t.Error("no PREFIXRING_ variable: the gossip key should come from a Secret through one")
	}
	if len(c.routerC.EnvFrom) > 0 {
		t.Error("envFrom would set variables the test cannot check against serve --help")
	}
}

func (c *cluster) checkRouterPorts(t *testing.T) {
	for _, fp := range []struct {
		flag   string
		protos []corev1.Protocol
	}{
		{"listen", []corev1.Protocol{corev1.ProtocolTCP}},
		{"admin-listen", []corev1.Protocol{corev1.ProtocolTCP}},
		{"gossip-bind", []corev1.Protocol{corev1.ProtocolTCP, corev1.ProtocolUDP}},
	} {
		p := c.flagPort(t, fp.flag)
		for _, proto := range fp.protos {
			if _, ok := containerPort(c.router, intstr.FromInt32(p), proto); !ok {
				t.Errorf("--%s port %d/%s is not a container port", fp.flag, p, proto)
			}
		}
	}
	if a, b := c.flagPort(t, "gossip-advertise"), c.flagPort(t, "gossip-bind"); a != b {
		t.Errorf("--gossip-advertise port %d, --gossip-bind port %d", a, b)
	}
}

func (c *cluster) checkRouterProbes(t *testing.T) {
	listen := c.flagPort(t, "listen")
	for _, pr := range []struct {
		what  string
		probe *corev1.Probe
		path  string
	}{
		{"readinessProbe", c.routerC.ReadinessProbe, "/readyz"},
		{"livenessProbe", c.routerC.LivenessProbe, "/healthz"},
	} {
		if pr.probe == nil || pr.probe.HTTPGet == nil {
			t.Errorf("router has no HTTP %s", pr.what)
			continue
		}
		g := pr.probe.HTTPGet
		if g.Path != pr.path {
			t.Errorf("%s path %s, want %s", pr.what, g.Path, pr.path)
		}
		if p, ok := containerPort(c.router, g.Port, corev1.ProtocolTCP); !ok || p != listen {
			t.Errorf("%s port %s is container port %d (found %v), want --listen's %d", pr.what, g.Port.String(), p, ok, listen)
		}
	}
}

// preStopSleep is a container's preStop sleep, 0 without one.
func preStopSleep(t *testing.T, c *corev1.Container) time.Duration {
	if c.Lifecycle == nil || c.Lifecycle.PreStop == nil || c.Lifecycle.PreStop.Sleep == nil {
		t.Errorf("container %s has no preStop sleep", c.Name)
		return 0
	}
	return time.Duration(c.Lifecycle.PreStop.Sleep.Seconds) * time.Second
}

// routerLeaveTimeout is router.LeaveTimeout, the gossip leave's bound at
// shutdown (this module does not import the router's; router's
// TestLeaveTimeoutIsTheDeploymentsFigure pins the two together).
const routerLeaveTimeout = 5 * time.Second

// checkDrain: the kubelet sleeps in preStop as long as the router then
// stays ready-failing but serving, and the grace period covers the
// sleep, the drain delay, the drain timeout and the gossip leave, all of
// which it counts.
func (c *cluster) checkDrain(t *testing.T) {
	delay, timeout := c.args.duration(t, "drain-delay"), c.args.duration(t, "drain-timeout")
	sleep := preStopSleep(t, c.routerC)
	if sleep != delay {
		t.Errorf("preStop sleeps %v, --drain-delay is %v", sleep, delay)
	}
	gp := c.router.Spec.Template.Spec.TerminationGracePeriodSeconds
	if gp == nil {
		t.Fatal("router sets no terminationGracePeriodSeconds (30 s default)")
	}
	if grace := time.Duration(*gp) * time.Second; grace <= sleep+delay+timeout+routerLeaveTimeout {
		t.Errorf("terminationGracePeriodSeconds %v <= preStop %v + --drain-delay %v + --drain-timeout %v + the gossip leave's %v",
			grace, sleep, delay, timeout, routerLeaveTimeout)
	}
	// vLLM: routers must stop picking a pod before it stops serving.
	vs, interval := preStopSleep(t, c.vllmC), c.args.duration(t, "dns-interval")
	if vs <= interval {
		t.Errorf("vLLM preStop sleeps %v, not longer than the routers' --dns-interval %v", vs, interval)
	}
	if gp := c.vllm.Spec.Template.Spec.TerminationGracePeriodSeconds; gp == nil || time.Duration(*gp)*time.Second <= vs {
		t.Errorf("vLLM terminationGracePeriodSeconds %v does not outlast its preStop sleep %v", gp, vs)
	}
}

// checkMemory: the request bodies the router may buffer together
// (--max-buffered-body-bytes) fit its container's memory limit with room
// for the rest of its heap, so a burst of large bodies gets 503 from the
// router, not an OOM kill from the kubelet that drops every stream of the
// replica. Until stop 40 the default budget, 1 GiB, was twice the 512Mi
// limit.
func (c *cluster) checkMemory(t *testing.T) {
	budget, err := strconv.ParseInt(c.args.get("max-buffered-body-bytes"), 10, 64)
	if err != nil {
		t.Fatalf("--max-buffered-body-bytes=%q: %v", c.args.get("max-buffered-body-bytes"), err)
	}
	lim, ok := c.routerC.Resources.Limits[corev1.ResourceMemory]
	if !ok {
		t.Fatal("the router has no memory limit")
	}
	if 2*budget > lim.Value() {
		t.Errorf("body budget %d B is more than half the router's memory limit %s", budget, lim.String())
	}
}

func (c *cluster) checkHardening(t *testing.T) {
	pod := c.router.Spec.Template.Spec
	psc, sc := pod.SecurityContext, c.routerC.SecurityContext
	if psc == nil || psc.RunAsNonRoot == nil || !*psc.RunAsNonRoot {
		t.Error("pod securityContext.runAsNonRoot is not true")
	}
	if psc == nil || psc.RunAsUser == nil || *psc.RunAsUser == 0 {
		t.Error("pod securityContext.runAsUser is not a non-zero uid (the kubelet cannot check a named USER)")
	}
	if psc == nil || psc.SeccompProfile == nil || psc.SeccompProfile.Type != corev1.SeccompProfileTypeRuntimeDefault {
		t.Error("pod seccompProfile is not RuntimeDefault")
	}
	if sc == nil {
		t.Fatal("router container has no securityContext")
	}
	if sc.AllowPrivilegeEscalation == nil || *sc.AllowPrivilegeEscalation {
		t.Error("allowPrivilegeEscalation is not false")
	}
	if sc.ReadOnlyRootFilesystem == nil || !*sc.ReadOnlyRootFilesystem {
		t.Error("readOnlyRootFilesystem is not true")
	}
	if sc.Privileged != nil && *sc.Privileged {
		t.Error("privileged")
	}
	if sc.Capabilities == nil || !slices.Contains(sc.Capabilities.Drop, "ALL") || len(sc.Capabilities.Add) > 0 {
		t.Errorf("capabilities %+v: want drop ALL and add none", sc.Capabilities)
	}
	if pod.EnableServiceLinks == nil || *pod.EnableServiceLinks {
		t.Error("enableServiceLinks is not false: Service variables (PREFIXRING_PORT, ...) would share the flags' PREFIXRING_ namespace")
	}
	if pod.AutomountServiceAccountToken == nil || *pod.AutomountServiceAccountToken {
		t.Error("the router mounts a service account token it never uses")
	}
	r := c.routerC.Resources
	for _, name := range []corev1.ResourceName{corev1.ResourceCPU, corev1.ResourceMemory} {
		req, okR := r.Requests[name]
		lim, okL := r.Limits[name]
		if !okR || !okL {
			t.Errorf("%s: request set %v, limit set %v; want both", name, okR, okL)
		} else if req.Cmp(lim) > 0 {
			t.Errorf("%s request %s above its limit %s", name, req.String(), lim.String())
		}
	}
}

func (c *cluster) checkSpread(t *testing.T) {
	if r := c.router.Spec.Replicas; r == nil || *r != 3 {
		t.Errorf("router replicas %v, want 3", r)
	}
	sel, err := metav1.LabelSelectorAsSelector(c.router.Spec.Selector)
	if err != nil || !sel.Matches(labels.Set(c.router.Spec.Template.Labels)) {
		t.Errorf("the Deployment's selector does not match its pods (%v)", err)
	}
	tsc := c.router.Spec.Template.Spec.TopologySpreadConstraints
	keys := map[string]bool{}
	for _, s := range tsc {
		keys[s.TopologyKey] = true
		sel, err := metav1.LabelSelectorAsSelector(s.LabelSelector)
		if err != nil || s.LabelSelector == nil || sel.Empty() || !sel.Matches(labels.Set(c.router.Spec.Template.Labels)) {
			t.Errorf("spread over %s: labelSelector %v does not select the router pods (%v)", s.TopologyKey, s.LabelSelector, err)
		}
		if s.MaxSkew < 1 {
			t.Errorf("spread over %s: maxSkew %d", s.TopologyKey, s.MaxSkew)
		}
	}
	if !keys["kubernetes.io/hostname"] || !keys["topology.kubernetes.io/zone"] {
		t.Errorf("router spreads over %v, want nodes and zones", keys)
	}
}

// checkServices: every Service selects one Deployment's pods and every
// port's targetPort names one of their container ports.
func (c *cluster) checkServices(t *testing.T) {
	for _, svc := range c.services {
		d := c.selected(t, svc)
		if len(svc.Spec.Ports) == 0 {
			t.Errorf("Service %s has no ports", svc.Name)
		}
		for _, p := range svc.Spec.Ports {
			if p.TargetPort.Type != intstr.String {
				t.Errorf("Service %s port %s: targetPort %s is a number, want a container port's name", svc.Name, p.Name, p.TargetPort.String())
			}
			if _, ok := containerPort(d, p.TargetPort, p.Protocol); !ok {
				t.Errorf("Service %s port %s: targetPort %s/%s is no container port of %s", svc.Name, p.Name, p.TargetPort.String(), p.Protocol, d.Name)
			}
		}
	}
	client := c.services[routerName]
	if client == nil {
		t.Fatalf("no client Service %s", routerName)
	}
	listen := c.flagPort(t, "listen")
	for _, p := range client.Spec.Ports {
		if cp, _ := containerPort(c.router, p.TargetPort, p.Protocol); cp != listen {
			t.Errorf("client Service %s exposes container port %d; it should expose --listen's %d only", client.Name, cp, listen)
		}
	}
}

// checkAdminPort: /metrics and /debug/* reach Prometheus through one
// in-cluster Service, never through the client Service or a load balancer.
func (c *cluster) checkAdminPort(t *testing.T) {
	admin := c.flagPort(t, "admin-listen")
	var with []*corev1.Service
	for _, svc := range c.services {
		if !selects(svc.Spec.Selector, c.router) {
			continue
		}
		for _, p := range svc.Spec.Ports {
			if cp, _ := containerPort(c.router, p.TargetPort, p.Protocol); cp == admin {
				with = append(with, svc)
			}
		}
	}
	if len(with) != 1 {
		t.Fatalf("%d Services expose the admin port %d, want 1", len(with), admin)
	}
	svc := with[0]
	if svc.Spec.Type != corev1.ServiceTypeClusterIP || svc.Spec.ClusterIP == corev1.ClusterIPNone {
		t.Errorf("admin Service %s is type %q clusterIP %q, want a ClusterIP Service", svc.Name, svc.Spec.Type, svc.Spec.ClusterIP)
	}
	if len(svc.Spec.Ports) != 1 {
		t.Errorf("admin Service %s exposes %d ports, want the admin port only", svc.Name, len(svc.Spec.Ports))
	}
}

// headless finds the headless Service a DNS name in the pod's namespace
// resolves through: name, or name.namespace[.svc...].
func (c *cluster) headless(t *testing.T, host string) *corev1.Service {
	t.Helper()
	labels := strings.Split(host, ".")
	svc := c.services[labels[0]]
	if svc == nil {
		t.Fatalf("%s names no Service", host)
	}
	if len(labels) > 1 && labels[1] != svc.Namespace {
		t.Fatalf("%s is in namespace %s, the Service in %s", host, labels[1], svc.Namespace)
	}
	if svc.Spec.ClusterIP != corev1.ClusterIPNone {
		t.Fatalf("Service %s is not headless: its name resolves to one virtual IP, not to each pod", svc.Name)
	}
	return svc
}

// checkJoin: --join resolves, through a headless Service that lists pods
// before they are ready, to every router pod's gossip port.
func (c *cluster) checkJoin(t *testing.T) {
	joins := c.args.get("join")
	if joins == "" {
		t.Fatal("no --join: replicas would never find each other")
	}
	bind := c.flagPort(t, "gossip-bind")
	for _, j := range strings.Split(joins, ",") {
		host, p, err := net.SplitHostPort(j)
		if err != nil {
			host, p = j, fmt.Sprint(bind)
		}
		svc := c.headless(t, host)
		if !svc.Spec.PublishNotReadyAddresses {
			t.Errorf("gossip Service %s lacks publishNotReadyAddresses: replicas that are not ready yet could not join", svc.Name)
		}
		if !selects(svc.Spec.Selector, c.router) {
			t.Errorf("gossip Service %s does not select the router pods", svc.Name)
		}
		if p != fmt.Sprint(bind) {
			t.Errorf("--join %s dials port %s, replicas gossip on %d", j, p, bind)
		}
	}
}

// vllmFlag finds --name=value or --name in vLLM's arguments.
func vllmFlag(args []string, name string) (string, bool) {
	for _, a := range args {
		if a == "--"+name {
			return "", true
		}
		if v, ok := strings.CutPrefix(a, "--"+name+"="); ok {
			return v, true
		}
	}
	return "", false
}

// checkDiscovery: --endpoints-dns resolves, through a headless Service of
// ready pods, to the port vLLM serves on, with prefix caching on.
func (c *cluster) checkDiscovery(t *testing.T) {
	dns := c.args.get("endpoints-dns")
	host, p, err := net.SplitHostPort(dns)
	if err != nil {
		t.Fatalf("--endpoints-dns %q: %v", dns, err)
	}
	svc := c.headless(t, host)
	if svc.Spec.PublishNotReadyAddresses {
		t.Errorf("vLLM Service %s publishes pods that are still loading", svc.Name)
	}
	if !selects(svc.Spec.Selector, c.vllm) {
		t.Errorf("Service %s does not select the vLLM pods", svc.Name)
	}
	var n int32
	fmt.Sscan(p, &n)
	if _, ok := containerPort(c.vllm, intstr.FromInt32(n), corev1.ProtocolTCP); !ok {
		t.Errorf("--endpoints-dns port %s is not a vLLM container port", p)
	}
	if vp, ok := vllmFlag(c.vllmC.Args, "port"); ok && vp != p {
		t.Errorf("vLLM serves on --port %s, the routers dial %s", vp, p)
	}
	if _, ok := vllmFlag(c.vllmC.Args, "enable-prefix-caching"); !ok {
		t.Error("vLLM runs without --enable-prefix-caching")
	}
	// The routers probe --health-path; vLLM's readiness uses the same.
	rp := c.vllmC.ReadinessProbe
	if rp == nil || rp.HTTPGet == nil {
		t.Fatal("vLLM has no HTTP readinessProbe")
	}
	if want := c.args.get("health-path"); rp.HTTPGet.Path != want {
		t.Errorf("vLLM readiness path %s, the routers probe %s", rp.HTTPGet.Path, want)
	}
	if cp, _ := containerPort(c.vllm, rp.HTTPGet.Port, corev1.ProtocolTCP); fmt.Sprint(cp) != p {
		t.Errorf("vLLM readiness probes port %d, it serves on %s", cp, p)
	}
}

func (c *cluster) checkPDB(t *testing.T) {
	if len(c.pdbs) != 1 {
		t.Fatalf("%d PodDisruptionBudgets, want 1", len(c.pdbs))
	}
	for _, pdb := range c.pdbs {
		sel, err := metav1.LabelSelectorAsSelector(pdb.Spec.Selector)
		if err != nil || sel.Empty() || !sel.Matches(labels.Set(c.router.Spec.Template.Labels)) || sel.Matches(labels.Set(c.vllm.Spec.Template.Labels)) {
			t.Errorf("PodDisruptionBudget %s selects %v, want the router pods only (%v)", pdb.Name, pdb.Spec.Selector, err)
		}
		replicas := int(*c.router.Spec.Replicas)
		switch {
		case pdb.Spec.MaxUnavailable != nil:
			if v := pdb.Spec.MaxUnavailable; v.Type != intstr.Int || v.IntValue() < 1 || v.IntValue() >= replicas {
				t.Errorf("maxUnavailable %s: want between 1 and %d", v.String(), replicas-1)
			}
		case pdb.Spec.MinAvailable != nil:
			if v := pdb.Spec.MinAvailable; v.Type != intstr.Int || v.IntValue() >= replicas {
				t.Errorf("minAvailable %s blocks every drain of %d replicas", v.String(), replicas)
			}
		default:
			t.Error("neither maxUnavailable nor minAvailable")
		}
	}
}

// checkMonitors: each ServiceMonitor selects Services in its namespace and
// scrapes a port they have; one reaches the routers' admin listener and
// one vLLM's port.
func (c *cluster) checkMonitors(t *testing.T) {
	scraped := map[string]int32{} // Deployment -> container port scraped
	for _, sm := range c.monitors {
		if sm.Spec.NamespaceSelector != nil {
			t.Errorf("ServiceMonitor %s: namespaceSelector; the test models its own namespace only", sm.Name)
		}
		sel, err := metav1.LabelSelectorAsSelector(&sm.Spec.Selector)
		if err != nil || sel.Empty() {
			t.Errorf("ServiceMonitor %s: selector %v (%v)", sm.Name, sm.Spec.Selector, err)
			continue
		}
		var svcs []*corev1.Service
		for _, svc := range c.services {
			if svc.Namespace == sm.Namespace && sel.Matches(labels.Set(svc.Labels)) {
				svcs = append(svcs, svc)
			}
		}
		if len(svcs) != 1 {
			t.Errorf("ServiceMonitor %s selects %d Services, want 1", sm.Name, len(svcs))
			continue
		}
		svc, d := svcs[0], c.selected(t, svcs[0])
		for _, ep := range sm.Spec.Endpoints {
			if ep.Path != "" && ep.Path != "/metrics" {
				t.Errorf("ServiceMonitor %s scrapes %s", sm.Name, ep.Path)
			}
			i := slices.IndexFunc(svc.Spec.Ports, func(p corev1.ServicePort) bool { return p.Name == ep.Port })
			if i < 0 {
				t.Errorf("ServiceMonitor %s: port %q is no port of Service %s", sm.Name, ep.Port, svc.Name)
				continue
			}
			sp := svc.Spec.Ports[i]
			cp, _ := containerPort(d, sp.TargetPort, sp.Protocol)
			scraped[d.Name] = cp
		}
	}
	if got, want := scraped[routerName], c.flagPort(t, "admin-listen"); got != want {
		t.Errorf("the routers are scraped on port %d, their admin listener is on %d", got, want)
	}
	if _, ok := scraped[vllmName]; !ok {
		t.Error("no ServiceMonitor scrapes vLLM (the dashboard's engine panels)")
	}
}

// checkSecrets: every required secret reference resolves, and the gossip
// key comes from one and is a key memberlist accepts.
func (c *cluster) checkSecrets(t *testing.T) {
	for _, d := range c.deployments {
		for _, ct := range d.Spec.Template.Spec.Containers {
			for _, e := range ct.Env {
				if e.ValueFrom == nil || e.ValueFrom.SecretKeyRef == nil {
					continue
				}
				ref := e.ValueFrom.SecretKeyRef
				s := c.secrets[ref.Name]
				if s == nil {
					if ref.Optional == nil || !*ref.Optional {
						t.Errorf("%s/%s: env %s reads Secret %s, which the overlay lacks", d.Name, ct.Name, e.Name, ref.Name)
					}
					continue
				}
				if _, ok := s.Data[ref.Key]; !ok {
					t.Errorf("%s/%s: env %s reads key %s, which Secret %s lacks", d.Name, ct.Name, e.Name, ref.Key, ref.Name)
				}
			}
		}
	}
	i := slices.IndexFunc(c.routerC.Env, func(e corev1.EnvVar) bool { return e.Name == "PREFIXRING_GOSSIP_KEY" })
	if i < 0 {
		t.Fatal("no PREFIXRING_GOSSIP_KEY: gossip would be unencrypted and open to any pod")
	}
	e := c.routerC.Env[i]
	if e.Value != "" || e.ValueFrom == nil || e.ValueFrom.SecretKeyRef == nil {
		t.Fatal("PREFIXRING_GOSSIP_KEY is not read from a Secret")
	}
	if _, inArgs := c.args.set["gossip-key"]; inArgs {
		t.Error("--gossip-key in the arguments puts the key in the pod spec")
	}
	ref := e.ValueFrom.SecretKeyRef
	if s := c.secrets[ref.Name]; s != nil {
		// The example ships no key anyone could read here and use: its
		// placeholder is one the router refuses, so a replica applied
		// unchanged stops at start instead of gossiping under a
		// published key.
		key := string(s.Data[ref.Key])
		if _, err := base64.StdEncoding.DecodeString(key); err == nil {
			t.Errorf("the example's gossip key %q decodes: a published key authenticates nobody", key)
		}
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		cmd := exec.CommandContext(ctx, binary(t), "serve", "--listen", "127.0.0.1:0", "--admin-listen", "",
			"--endpoints", "http://127.0.0.1:1", "--gossip-bind", "127.0.0.1:0")
		cmd.Env = append(os.Environ(), "PREFIXRING_GOSSIP_KEY="+key)
		out, err := cmd.CombinedOutput()
		if ctx.Err() != nil || err == nil || !strings.Contains(string(out), "--gossip-key") {
			t.Errorf("serve with the example's gossip key: %v (%v), want a refusal naming --gossip-key:\n%s", err, ctx.Err(), out)
		}
	}
}
