package kubeletpod

import "testing"

// A flag given more than once (kubeadm v1beta4's extraArgs allow it: two
// --service-account-issuer while tokens rotate) is one flag with a list of
// values, in order: the first issuer issues, the others are accepted.
// Another order or another list of values is another pod to kubelet, and
// Diff names the values; it never calls them "the same arguments in
// another order".
func TestDiffRepeatedFlag(t *testing.T) {
	const (
		one   = "    - --leader-elect=true\n"
		a     = "    - --authentication-kubeconfig=a.conf\n"
		b     = "    - --authentication-kubeconfig=b.conf\n"
		where = "spec.containers[kube-scheduler].command: "
	)
	cases := []struct{ name, from, to, want string }{
		{"the two values swapped", one + a + b, one + b + a,
			where + "--authentication-kubeconfig=a.conf --authentication-kubeconfig=b.conf -> --authentication-kubeconfig=b.conf --authentication-kubeconfig=a.conf (the same values in another order)"},
		{"the first value dropped", one + a + b, one + b,
			where + "--authentication-kubeconfig=a.conf --authentication-kubeconfig=b.conf -> --authentication-kubeconfig=b.conf"},
		{"the last value dropped", one + a + b, one + a,
			where + "--authentication-kubeconfig=a.conf --authentication-kubeconfig=b.conf -> --authentication-kubeconfig=a.conf"},
		{"a second value added", one + a, one + a + b,
			where + "--authentication-kubeconfig=a.conf -> --authentication-kubeconfig=a.conf --authentication-kubeconfig=b.conf"},
		{"both removed", one + a + b, one,
			where + "--authentication-kubeconfig=a.conf --authentication-kubeconfig=b.conf removed"},
		{"the values apart instead of together", one + a + b, a + one + b,
			where + "the same arguments in another order"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			from := decode(t, edit(t, one, tc.from))
			to := decode(t, edit(t, one, tc.to))
			if Same(from, to) {
				t.Fatal("Same says one pod; kubelet hashes the command line in order and sees two")
			}
			if d := Diff(from, to); len(d) != 1 || d[0] != tc.want {
				t.Errorf("Diff = %q\nwant one line %q", d, tc.want)
			}
			if !Same(from, decode(t, edit(t, one, tc.from))) {
				t.Error("Same says a pod differs from itself")
			}
		})
	}
}
