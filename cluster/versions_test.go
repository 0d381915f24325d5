package cluster

import (
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
)

func TestOthersOnMinor(t *testing.T) {
	h := &Health{Self: 1, Members: []MemberHealth{
		{ID: 1, Name: "a", Healthy: true, Version: "3.6.16"},
		{ID: 2, Name: "b", Healthy: true, Version: "3.7.3"},
		{ID: 3, Name: "c", Healthy: true, Version: "3.7.3"},
	}}
	if ok, behind := h.OthersOnMinor("3.7"); !ok || len(behind) != 0 {
		t.Fatalf("every other member on 3.7: %v %v", ok, behind)
	}
	h.Members[2].Version = "3.6.16"
	if ok, behind := h.OthersOnMinor("3.7"); ok || len(behind) != 1 || behind[0] != "c (3.6.16)" {
		t.Fatalf("c on 3.6: %v %v", ok, behind)
	}
	h.Members[2] = MemberHealth{ID: 3, Name: "c", Healthy: false, Version: ""}
	if ok, behind := h.OthersOnMinor("3.7"); ok || behind[0] != "c ((unknown))" {
		t.Fatalf("c silent: %v %v", ok, behind)
	}
	if ok, _ := h.OthersOnMinor("3.71"); ok {
		t.Fatal("3.7.3 taken for minor 3.71")
	}
}

func TestVersionsCluster(t *testing.T) {
	v := &Versions{Members: []MemberVersion{
		{ID: 1, Name: "a", Server: "3.6.16", Cluster: "3.6.0"},
		{ID: 2, Name: "b", Err: "no answer"},
		{ID: 3, Name: "c", Server: "3.7.3", Cluster: "3.7.0"},
	}}
	if got := v.Cluster(); got != "3.7.0" {
		t.Fatalf("Cluster() = %q, want the newest answer 3.7.0", got)
	}
	if got := (&Versions{Members: []MemberVersion{{ID: 2, Err: "no answer"}}}).Cluster(); got != "" {
		t.Fatalf("Cluster() with no answer = %q, want \"\"", got)
	}
	for _, c := range []struct {
		v, minor string
		want     bool
	}{{"3.7.0", "3.7", true}, {"3.8.1", "3.7", true}, {"3.6.16", "3.7", false}, {"4.0.0", "3.7", true}, {"", "3.7", false}, {"not_decided", "3.7", false}} {
		if got := MinorAtLeast(c.v, c.minor); got != c.want {
			t.Errorf("MinorAtLeast(%q, %q) = %v, want %v", c.v, c.minor, got, c.want)
		}
	}
}

// getVersion reads etcd's /version answer; a cluster version etcd has not
// decided is "", a body that is not etcd's an error.
func TestGetVersion(t *testing.T) {
	var body atomic.Pointer[string]
	set := func(s string) { body.Store(&s) }
	set(`{"etcdserver":"3.6.16","etcdcluster":"3.6.0"}`)
	srv := httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/version" {
			http.NotFound(w, r)
			return
		}
		fmt.Fprint(w, *body.Load())
	}))
	defer srv.Close()
	hc := srv.Client()
	ctx := t.Context()
	if s, c, err := versionAt(ctx, hc, []string{"https://127.0.0.1:1", srv.URL}); err != nil || s != "3.6.16" || c != "3.6.0" {
		t.Fatalf("versionAt = %q %q %v, want 3.6.16 3.6.0 from the URL that answers", s, c, err)
	}
	set(`{"etcdserver":"3.6.16","etcdcluster":"not_decided"}`)
	if s, c, err := versionAt(ctx, hc, []string{srv.URL}); err != nil || s != "3.6.16" || c != "" {
		t.Fatalf("versionAt (not decided) = %q %q %v", s, c, err)
	}
	set(`<html>`)
	if _, _, err := versionAt(ctx, hc, []string{srv.URL}); err == nil {
		t.Fatal("a body that is not etcd's /version was taken")
	}
	if _, _, err := versionAt(ctx, hc, nil); err == nil || !strings.Contains(err.Error(), "no client URL") {
		t.Fatalf("no URL: %v", err)
	}
}
