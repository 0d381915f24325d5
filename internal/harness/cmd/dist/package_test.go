package main

import "testing"

// TestPackageVersion: a release tag is the package version; anything else
// git describe prints sorts below every release in dpkg and rpm, and holds
// no '-' (rpm refuses it).
func TestPackageVersion(t *testing.T) {
	for in, want := range map[string]string{
		"v1.2.3":          "1.2.3",
		"6e25152":         "0.0.0~git6e25152",
		"6e25152-dirty":   "0.0.0~git6e25152.dirty",
		"v1.2.3-4-gabcde": "0.0.0~gitv1.2.3.4.gabcde",
	} {
		if got := packageVersion(in); got != want {
			t.Errorf("packageVersion(%q) = %q, want %q", in, got, want)
		}
	}
}
