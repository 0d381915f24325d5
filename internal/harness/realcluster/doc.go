// Package realcluster makes a real kubeadm cluster on this machine (issue
// 38): control-plane nodes that share nothing but the kernel, each in a
// network namespace of its own with an address on a bridge, a mount
// namespace of its own in which kubeadm's fixed paths (/etc/kubernetes,
// /var/lib/kubelet, /var/lib/etcd) and containerd's and kubelet's host
// paths are bound to the node's directories, its own containerd and the
// real kubelet of Version; the cluster itself is made by the real kubeadm
// of Version (init, then join --control-plane), pulling the control-plane
// images built from the real binaries from a registry on the bridge.
//
// Everything a node starts runs inside its namespaces, so its teardown
// finds it by namespace, never by name: processes, mounts (they die with
// the mount namespace), cgroups (the node's own cgroup root) and the
// network namespace. The tests run only with STRATUM_REAL_CLUSTER=1 (make
// real-cluster), as root.
package realcluster
