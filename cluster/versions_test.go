package cluster

import "testing"

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
