package deploy

import (
	"fmt"
	"path/filepath"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/kustomize/api/krusty"
	"sigs.k8s.io/kustomize/kyaml/filesys"
	"sigs.k8s.io/yaml"
)

// serviceMonitor is the part of the Prometheus Operator's ServiceMonitor
// (monitoring.coreos.com/v1) the manifests use; decoding strictly into it
// rejects anything else, misspellings included.
type serviceMonitor struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata"`
	Spec              struct {
		Selector          metav1.LabelSelector `json:"selector"`
		NamespaceSelector *struct {
			Any        bool     `json:"any,omitempty"`
			MatchNames []string `json:"matchNames,omitempty"`
		} `json:"namespaceSelector,omitempty"`
		Endpoints []struct {
			Port        string `json:"port"`
			Path        string `json:"path,omitempty"`
			Interval    string `json:"interval,omitempty"`
			HonorLabels bool   `json:"honorLabels,omitempty"`
		} `json:"endpoints"`
	} `json:"spec"`
}

// manifests are the objects a kustomization builds, decoded by kind.
type manifests struct {
	namespaces      map[string]*corev1.Namespace
	serviceAccounts map[string]*corev1.ServiceAccount
	deployments     map[string]*appsv1.Deployment
	services        map[string]*corev1.Service
	secrets         map[string]*corev1.Secret
	pdbs            map[string]*policyv1.PodDisruptionBudget
	monitors        map[string]*serviceMonitor
	count           int
}

// kinds are the kinds the manifests may hold, with their apiVersion.
var kinds = map[string]string{
	"Namespace": "v1", "ServiceAccount": "v1", "Service": "v1", "Secret": "v1",
	"Deployment": "apps/v1", "PodDisruptionBudget": "policy/v1", "ServiceMonitor": "monitoring.coreos.com/v1",
}

// kustomize builds the kustomization in dir (relative to deploy/) with
// kustomize's library, as `kubectl kustomize` does.
func kustomize(t *testing.T, dir string) manifests {
	t.Helper()
	k := krusty.MakeKustomizer(krusty.MakeDefaultOptions())
	abs, err := filepath.Abs(dir)
	if err != nil {
		t.Fatal(err)
	}
	rm, err := k.Run(filesys.MakeFsOnDisk(), abs)
	if err != nil {
		t.Fatalf("kustomize build %s: %v", dir, err)
	}
	m := manifests{
		namespaces: map[string]*corev1.Namespace{}, serviceAccounts: map[string]*corev1.ServiceAccount{},
		deployments: map[string]*appsv1.Deployment{}, services: map[string]*corev1.Service{},
		secrets: map[string]*corev1.Secret{}, pdbs: map[string]*policyv1.PodDisruptionBudget{},
		monitors: map[string]*serviceMonitor{},
	}
	for _, r := range rm.Resources() {
		y, err := r.AsYAML()
		if err != nil {
			t.Fatal(err)
		}
		if err := m.add(y); err != nil {
			t.Errorf("%s %s: %v\n%s", r.GetKind(), r.GetName(), err, y)
		}
	}
	return m
}

// add decodes one object strictly: a field its Go type lacks is an error.
func (m *manifests) add(y []byte) error {
	var tm metav1.TypeMeta
	if err := yaml.Unmarshal(y, &tm); err != nil {
		return err
	}
	if want, ok := kinds[tm.Kind]; !ok {
		return fmt.Errorf("kind %q is not one the tests check", tm.Kind)
	} else if tm.APIVersion != want {
		return fmt.Errorf("apiVersion %q, want %q", tm.APIVersion, want)
	}
	m.count++
	switch tm.Kind {
	case "Namespace":
		return decodeInto(y, m.namespaces)
	case "ServiceAccount":
		return decodeInto(y, m.serviceAccounts)
	case "Deployment":
		return decodeInto(y, m.deployments)
	case "Service":
		return decodeInto(y, m.services)
	case "Secret":
		return decodeInto(y, m.secrets)
	case "PodDisruptionBudget":
		return decodeInto(y, m.pdbs)
	default: // ServiceMonitor
		return decodeInto(y, m.monitors)
	}
}

type named interface{ GetName() string }

func decodeInto[T any, PT interface {
	*T
	named
}](y []byte, into map[string]PT) error {
	obj := PT(new(T))
	if err := yaml.UnmarshalStrict(y, obj); err != nil {
		return err
	}
	if obj.GetName() == "" {
		return fmt.Errorf("no metadata.name")
	}
	if _, dup := into[obj.GetName()]; dup {
		return fmt.Errorf("two objects named %s", obj.GetName())
	}
	into[obj.GetName()] = obj
	return nil
}

// TestStrictDecodingRejectsUnknownFields is the strict decoding's control:
// a misspelt field fails, in a Kubernetes type and in the ServiceMonitor.
func TestStrictDecodingRejectsUnknownFields(t *testing.T) {
	m := manifests{deployments: map[string]*appsv1.Deployment{}, monitors: map[string]*serviceMonitor{}}
	good := "apiVersion: apps/v1\nkind: Deployment\nmetadata:\n  name: d\nspec:\n  replicas: 3\n"
	if err := m.add([]byte(good)); err != nil {
		t.Fatalf("a valid Deployment: %v", err)
	}
	bad := map[string]string{
		"misspelt Deployment field": "apiVersion: apps/v1\nkind: Deployment\nmetadata:\n  name: e\nspec:\n  replica: 3\n",
		"misspelt probe field":      "apiVersion: apps/v1\nkind: Deployment\nmetadata:\n  name: f\nspec:\n  template:\n    spec:\n      containers:\n      - name: c\n        readinessProbe:\n          httpGet:\n            path: /readyz\n            prot: http\n",
		"misspelt ServiceMonitor":   "apiVersion: monitoring.coreos.com/v1\nkind: ServiceMonitor\nmetadata:\n  name: s\nspec:\n  endpoints:\n  - port: admin\n    intervall: 15s\n",
		"wrong apiVersion":          "apiVersion: extensions/v1beta1\nkind: Deployment\nmetadata:\n  name: g\n",
		"unchecked kind":            "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: h\n",
		"duplicate name":            good,
	}
	for what, y := range bad {
		if err := m.add([]byte(y)); err == nil {
			t.Errorf("%s decoded without error", what)
		}
	}
}
