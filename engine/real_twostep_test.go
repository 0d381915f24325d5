package engine

// Issue 42 on the real binaries: a two-step minor upgrade 1.36 -> 1.37,
// its rollbacks, and the storage a rollback must read back.

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"net/http"
	"slices"
	"strings"
	"testing"

	"github.com/ciq/stratum-upgrade/internal/harness/kubebuild"
	"github.com/ciq/stratum-upgrade/versions"
)

// storageHashes is every resource the API server serves with its
// discovery storageVersionHash, by "group/resource" ("core/pods"): the
// hash names the version the server stores the resource in.
func (a *apiserver) storageHashes() map[string]string {
	a.t.Helper()
	type resources struct {
		Resources []struct {
			Name string `json:"name"`
			Hash string `json:"storageVersionHash"`
		} `json:"resources"`
	}
	out := map[string]string{}
	add := func(group, path string) {
		var l resources
		if err := a.api.GetJSON(a.t.Context(), path, &l); err != nil {
			a.t.Fatal(err)
		}
		for _, r := range l.Resources {
			if r.Hash != "" && !strings.Contains(r.Name, "/") {
				out[group+"/"+r.Name] = r.Hash
			}
		}
	}
	add("core", "/api/v1")
	var groups struct {
		Groups []struct {
			Name     string `json:"name"`
			Versions []struct {
				GroupVersion string `json:"groupVersion"`
			} `json:"versions"`
		} `json:"groups"`
	}
	if err := a.api.GetJSON(a.t.Context(), "/apis", &groups); err != nil {
		a.t.Fatal(err)
	}
	for _, g := range groups.Groups {
		for _, v := range g.Versions {
			add(g.Name, "/apis/"+v.GroupVersion)
		}
	}
	return out
}

// storageObjects are objects of the built-in kinds whose storage version
// 1.37 changes from 1.36's (found by storageHashes: TestTwoStepReal
// fails when another kind changes and has none here), by "group/resource":
// each is created through 1.37 emulating 1.36 and must read back through
// 1.36.
var storageObjects = map[string][]string{
	"admissionregistration.k8s.io/mutatingadmissionpolicies": {
		`{"apiVersion":"admissionregistration.k8s.io/v1","kind":"MutatingAdmissionPolicy","metadata":{"name":"two-step-%d"},"spec":{"failurePolicy":"Ignore","reinvocationPolicy":"Never","matchConstraints":{"resourceRules":[{"apiGroups":[""],"apiVersions":["v1"],"operations":["CREATE"],"resources":["configmaps"]}]},"mutations":[{"patchType":"ApplyConfiguration","applyConfiguration":{"expression":"Object{metadata: Object.metadata{labels: {\"two-step\": \"%d\"}}}"}}]}}`,
	},
	"admissionregistration.k8s.io/mutatingadmissionpolicybindings": {
		`{"apiVersion":"admissionregistration.k8s.io/v1","kind":"MutatingAdmissionPolicyBinding","metadata":{"name":"two-step-%d"},"spec":{"policyName":"two-step-%d","matchResources":{"objectSelector":{"matchLabels":{"stratum-two-step":"probe"}}}}}`,
	},
}

// objectPath is the URL path of a cluster-scoped object of resource
// ("group/resource") in version v1, named name ("" for the collection).
func objectPath(resource, name string) string {
	group, res, _ := strings.Cut(resource, "/")
	p := "/apis/" + group + "/v1/" + res
	if name != "" {
		p += "/" + name
	}
	return p
}

// TestTwoStepReal takes Kubernetes 1.36 -> 1.37 in two steps on the real
// binaries (etcd stays at 3.6): the binary step commits with 1.37 storing
// as 1.36 does; objects of every kind whose storage 1.37 changes are
// created, and rollback --last takes the node back to 1.36, which reads
// each back. The binary step again, the finishing step (after which 1.37
// stores those kinds its own way), its rollback --last (emulating 1.36
// again), the finishing step once more, and then the move back to the
// 1.36 binaries is refused (EmulationFinished), nothing written.
func TestTwoStepReal(t *testing.T) {
	from, to := kubebuild.Versions[0], kubebuild.Versions[len(kubebuild.Versions)-1]
	needReal(t)
	f := realFixture(t, "testdata/states/real.yaml", from, realEtcd[from], nil)
	api := adminOf(t, f.node)
	commit := func(what string, res Result, err error) {
		t.Helper()
		if err != nil || res.Outcome != Committed {
			t.Fatalf("%s: %+v %v", what, res, err)
		}
	}
	at136 := api.storageHashes()
	up := realRelease(to, "")
	res, err := f.e.RunWith(t.Context(), up, nil, UpgradeOptions{TwoStep: true})
	commit("the binary step", res, err)
	if got := api.version(); got != to {
		t.Fatalf("after the binary step the API server is %s, want %s", got, to)
	}
	f.wantEmulated("after the binary step", "kube="+kubebuild.Minor(from))
	emulating := api.storageHashes()
	if !maps.Equal(emulating, at136) {
		t.Errorf("1.37 emulating 1.36 serves or stores otherwise than 1.36:\n1.36:      %v\nemulating: %v", at136, emulating)
	}

	var created []string
	for _, res := range slices.Sorted(maps.Keys(storageObjects)) {
		for i, body := range storageObjects[res] {
			for n := range 2 {
				b := fmt.Sprintf(body, i*2+n, i*2+n)
				if _, err := api.api.Do(t.Context(), http.MethodPost, objectPath(res, ""), []byte(b), http.StatusCreated); err != nil {
					t.Fatalf("create %s through 1.37 emulating 1.36: %v", res, err)
				}
				created = append(created, res+"/"+fmt.Sprintf("two-step-%d", i*2+n))
			}
		}
	}
	res, err = f.e.RollbackLast(t.Context())
	commit("rollback --last of the binary step", res, err)
	if got := api.version(); got != from {
		t.Fatalf("after the rollback the API server is %s, want %s", got, from)
	}
	read := 0
	for _, c := range created {
		i := strings.LastIndex(c, "/")
		b, err := api.api.Do(t.Context(), http.MethodGet, objectPath(c[:i], c[i+1:]), nil, http.StatusOK)
		var obj struct {
			Metadata struct{ Name string } `json:"metadata"`
		}
		if err != nil || json.Unmarshal(b, &obj) != nil || obj.Metadata.Name != c[i+1:] {
			t.Errorf("1.36 reads %s back: %v %s", c, err, b)
			continue
		}
		read++
	}

	res, err = f.e.RunWith(t.Context(), up, nil, UpgradeOptions{TwoStep: true})
	commit("the binary step again", res, err)
	res, err = f.e.Finish(t.Context(), UpgradeOptions{})
	commit("the finishing step", res, err)
	f.wantEmulated("after the finishing step", "-")
	at137 := api.storageHashes()
	for r, h := range at136 {
		if h2, ok := at137[r]; ok && h2 != h && storageObjects[r] == nil {
			t.Errorf("1.37 stores %s otherwise than 1.36 (storageVersionHash %s, was %s), and the test creates no object of it", r, h2, h)
		}
	}
	for r := range storageObjects {
		if at137[r] == at136[r] {
			t.Errorf("1.37 stores %s as 1.36 does (storageVersionHash %s): it is not a kind whose storage changes", r, at136[r])
		}
	}
	res, err = f.e.RollbackLast(t.Context())
	commit("rollback --last of the finishing step", res, err)
	f.wantEmulated("after the finishing step's rollback", "kube="+kubebuild.Minor(from))
	res, err = f.e.Finish(t.Context(), UpgradeOptions{})
	commit("the finishing step again", res, err)

	before := f.manifests()
	_, err = f.e.RunWith(t.Context(), realRelease(from, ""), nil, UpgradeOptions{IgnorePreflight: []string{IgnoreAll}})
	var pe *PreflightError
	refused := errors.As(err, &pe) && len(pe.Failed) > 0 && pe.Failed[0].Check == versions.CheckEmulationFinished
	if !refused {
		t.Fatalf("back to %s after the finish: %v, want an EmulationFinished refusal", from, err)
	}
	if after := f.manifests(); !maps.EqualFunc(before, after, bytes.Equal) {
		t.Error("the refused move changed the manifest directory")
	}
	t.Logf("refused: %v", err)
	line := fmt.Sprintf("two-step %s -> %s: binary step committed, rollback read back %d of %d objects, finish committed, binary rollback after finish refused",
		kubebuild.Minor(from), kubebuild.Minor(to), read, len(created))
	fmt.Println(line) // make test-real runs this test with -v: once, not twice
}
