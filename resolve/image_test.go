package resolve

import "testing"

func TestTagMinor(t *testing.T) {
	cases := []struct {
		image        string
		major, minor int
		ok           bool
	}{
		{"registry.k8s.io/etcd:3.6.16-0", 3, 6, true},
		{"registry.k8s.io/etcd:3.5.35-0", 3, 5, true},
		{"registry.k8s.io/etcd:v3.6.16", 3, 6, true},
		{"registry.k8s.io/etcd:3.6", 3, 6, true},
		{"registry.k8s.io/etcd:3.6.16-0@sha256:0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef", 3, 6, true},
		{"localhost:5000/etcd:3.6.16-0", 3, 6, true},
		{"quay.io/coreos/etcd:v3.5.0-rc.1", 3, 5, true},
		{"registry.k8s.io/etcd:3.10.0", 3, 10, true},
		{"registry.k8s.io/etcd:3.06.0", 3, 6, true},

		{"registry.k8s.io/etcd", 0, 0, false},
		{"registry.k8s.io/etcd@sha256:0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef", 0, 0, false},
		{"localhost:5000/etcd", 0, 0, false},
		{"registry.k8s.io/etcd:latest", 0, 0, false},
		{"registry.k8s.io/etcd:3", 0, 0, false},
		{"registry.k8s.io/etcd:3.x", 0, 0, false},
		{"registry.k8s.io/etcd:vv3.6", 0, 0, false},
		{"registry.k8s.io/etcd:03.6.0", 0, 0, false}, // accepted (3.6) by the old Sscanf parser
		{"", 0, 0, false},
	}
	for _, c := range cases {
		major, minor, ok := TagMinor(c.image)
		if major != c.major || minor != c.minor || ok != c.ok {
			t.Errorf("TagMinor(%q) = %d, %d, %v; want %d, %d, %v", c.image, major, minor, ok, c.major, c.minor, c.ok)
		}
	}
}
