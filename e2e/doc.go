// Package e2e runs stratum-upgrade end to end against a real kubelet
// (v1.34.4, built from k8s.io/kubernetes in the nested module
// internal/harness/tools/kubelet) on a real containerd and runc, as described in
// docs/e2e.md. It provides what that needs: the kubelet build, cached under
// $STRATUM_CACHE; docker-archive images written in Go (a pause image, the
// component stand-in under the components' image references, real etcd
// 3.5, 3.6 and 3.7, and, in an archive of their own, the real
// kube-apiserver, kube-controller-manager and kube-scheduler v1.36.3 and
// v1.37.2 of internal/harness/kubebuild); and a Host that starts
// containerd and kubelet with their own directories, sockets and ports and
// tears them down again.
//
// The end-to-end tests themselves only run with STRATUM_E2E=1 (make
// e2e-kubelet), as root, on a machine with containerd and runc installed:
// `go test ./...` compiles this package and skips them.
package e2e
