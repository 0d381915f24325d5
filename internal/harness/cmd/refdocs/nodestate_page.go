package main

// The node state's reference page: what nodestate.Parse's defaulting and
// Validate do with each field, in operator terms. The tests hold the
// "required" and "default" columns to what Parse does.

import (
	"fmt"
	"reflect"
	"strings"

	"github.com/ciq/stratum-upgrade/nodestate"
)

const absPath = "a clean absolute path (no `..`, `.`, `//` or trailing `/`)"

func portInfo(def int) info {
	return info{
		Required: "no",
		Default:  fmt.Sprintf("`%d` (also when 0)", def),
		Values:   "a port number, 1 to 65535, used by no other field of `ports`",
	}
}

var nodeStatePage = spec{
	File:  "node-state.md",
	Title: "Node state reference",
	Pkg:   "nodestate",
	Type:  reflect.TypeFor[nodestate.NodeState](),
	Intro: `
A node state describes one control-plane node: everything its static pod
manifests are rendered from. ` + "`stratum-upgrade init --state FILE`" + ` imports
it into the journal ([cli.md](../cli.md#init---state-file---force)); from
then on the journal's copy is the node's state, and a committed ` + "`run`" + `
moves it to the [release](release.md).

The file is YAML, decoded strictly: a field that is not below, or a value of
the wrong type, is an error that names the field's path. Absent optional
fields then take the defaults below, and every field is validated: every
invalid field is reported at once, by path, with what it must be, and
nothing is stored. The files the cis profile names, and whether each flag of
` + "`extraArgs`" + ` exists in the component's version, are checked when the
manifests are rendered (by ` + "`init`" + ` before anything is stored, and by
` + "`render`, `plan` and `run`" + `).`,
	Minimal:     "node-state-minimal.yaml",
	MinimalNote: "The required fields only; each other field takes its default.",
	Full:        "node-state-full.yaml",
	FullNote:    "Every field set.",
	Fields: map[string]info{
		"apiVersion": {Required: "yes", Values: "`stratum.ciq.com/v1`"},
		"kind":       {Required: "yes", Values: "`NodeState`"},
		"nodeName": {Required: "yes", Values: "a lowercase DNS name: 1 to 253 lowercase letters, " +
			"digits, `-` and `.`, starting and ending with a letter or digit"},
		"advertiseAddress": {Required: "yes", Values: "an IPv4 or IPv6 address, without a prefix length"},
		"kubernetesVersion": {Required: "yes", Values: "`v` and a semantic version: `v1.34.4`, `v1.35.0-rc.1`, " +
			"`v1.34.4+build.1`; no white space around it. The supported minors are in " +
			"[versions.md](../versions.md#support-matrix)"},
		"imageRepository": {
			Required: "no",
			Default:  "`registry.k8s.io` (kubeadm's)",
			Values: "an image repository without tag or digest: a lowercase registry host with an " +
				"optional port and path (`registry.k8s.io`, `mirror.example.com:5000/k8s`). The etcd " +
				"versions kubeadm pairs with each minor are in [versions.md](../versions.md#etcd-paired-with-each-kubernetes-minor)",
		},
		"images": {
			Type:     "map of component to string",
			Required: "for `kube-vip` when `vip` is set; for `etcd` when kubeadm's table pairs no etcd with `kubernetesVersion`'s minor",
			Default:  "none: every component but kube-vip runs kubeadm's image from `imageRepository`",
			Values: "keys: components the node runs: `etcd`, `kube-apiserver`, " +
				"`kube-controller-manager`, `kube-scheduler`, and `kube-vip` exactly when `vip` is set " +
				"(an entry for a component the node does not run is refused). Each value is an image " +
				"reference: a lowercase repository name with an optional registry host and port " +
				"(`registry.k8s.io/etcd`, `registry.example:5000/k8s/etcd`), then an optional `:tag` " +
				"(at most 128 letters, digits, `_`, `.` and `-`, not starting with `.` or `-`), then an " +
				"optional `@sha256:` digest of 64 lowercase hex digits. A tag that is a version " +
				"(`v1.34.4`; etcd's `3.6.16-0`, whose `-0` image revision is dropped) is the " +
				"component's version",
		},
		"versions": {
			Type:     "map of component to string",
			Required: "for `etcd` when the tag of `images.etcd` is not a version (an image pinned by digest alone)",
			Default: "none: a component's version is its image tag's, and a Kubernetes component " +
				"whose tag is not a version runs at `kubernetesVersion`",
			Values: "keys: components the node runs; values: a semantic version, `3.6.16` for etcd " +
				"and `v1.36.3` for the others (the `v` may be left out or added either way), no white " +
				"space. It must agree with the image's tag when that is a version",
		},
		"etcd": {Required: "no", Default: "each field's default"},
		"etcd.memberName": {Required: "no", Default: "the `nodeName`",
			Values: "a lowercase DNS name, as `nodeName`; `etcd.initialCluster` must list it"},
		"etcd.initialCluster": {Required: "no",
			Default: "this member alone: `<memberName>=https://<advertiseAddress>:<ports.etcdPeer>`",
			Values: "comma-separated `name=peerURL` entries, each URL starting with `https://` or " +
				"`http://`, one of them named `etcd.memberName`. With one entry (a single-member " +
				"cluster) the rollback of an etcd upgrade restores etcd's data from the snapshot " +
				"taken before it; with more, only etcd's manifest is restored and the other members " +
				"hold the data"},
		"etcd.initialClusterState": {Required: "no", Default: "`new`",
			Values: "`new` or `existing` (etcd's --initial-cluster-state: `existing` for a member " +
				"that joined a running cluster)"},
		"etcd.dataDir": {Required: "no", Default: "`" + nodestate.DefaultEtcdDataDir + "`", Values: absPath},
		"etcd.terminationGracePeriodSeconds": {Required: "no",
			Default: "none: the etcd pod carries none, as kubeadm's (kubelet waits 30 s); `run --to` sets 2 when it changes etcd's image",
			Values:  "whole seconds from 1 to 300; kubelet never waits less than 2"},
		"vip": {Required: "no", Default: "none: the node runs no kube-vip, and `images` has no `kube-vip` entry"},
		"vip.address": {Required: "when `vip` is set", Default: "none",
			Values: "an IPv4 or IPv6 address other than `advertiseAddress`"},
		"vip.interface": {Required: "when `vip` is set", Default: "none",
			Values: "a network interface name: 1 to 15 letters, digits, `_`, `.`, `:` and `-`"},
		"profile":      {Required: "no", Default: "the `default` profile"},
		"profile.name": {Required: "no", Default: "`default`", Values: "`default` or `cis`"},
		"profile.auditPolicyFile": {Required: "when `profile.name` is `cis`", Default: "none",
			Values: absPath + ", with the cis profile only; at render time the file must be an " +
				"audit.k8s.io/v1 Policy"},
		"profile.admissionConfigFile": {Required: "when `profile.name` is `cis`", Default: "none",
			Values: absPath + ", with the cis profile only; at render time the file must be an " +
				"apiserver.config.k8s.io AdmissionConfiguration, and the files its plugins name " +
				"with `path:` must be readable"},
		"profile.auditLogDir": {Required: "no",
			Default: "`" + nodestate.DefaultAuditLogDir + "` with the cis profile; unused by the default profile",
			Values:  absPath + " (checked with the cis profile only)"},
		"pkiDir":        {Required: "no", Default: "`" + nodestate.DefaultPKIDir + "`", Values: absPath},
		"kubeconfigDir": {Required: "no", Default: "`" + nodestate.DefaultKubeconfigDir + "`", Values: absPath},
		"configDir":     {Required: "no", Default: "`" + nodestate.DefaultConfigDir + "`", Values: absPath},
		"caCertDirs": {
			Type:     "list of paths",
			Required: "no",
			Default:  "`" + strings.Join(nodestate.DefaultCACertDirs, "`, `") + "`",
			Values: "absolute, clean paths, each once, not `/etc/ssl/certs` (always mounted, as `ca-certs`): the host's CA " +
				"certificate directories mounted read-only into kube-apiserver and kube-controller-manager, each as a " +
				"volume named after its path (`/etc/pki/ca-trust` is `etc-pki-ca-trust`). kubeadm mounts the ones of " +
				"`/etc/pki/ca-trust`, `/etc/pki/tls/certs`, `/etc/ca-certificates`, `/usr/share/ca-certificates` and " +
				"`/usr/local/share/ca-certificates` that exist on the host; `init --from-kubeadm` records what it mounted",
		},
		"networking": {Required: "no", Default: "each field's default"},
		"networking.serviceCIDR": {Required: "no", Default: "`" + nodestate.DefaultServiceCIDR + "`",
			Values: "a CIDR: an IPv4 or IPv6 address and a prefix length; or, dual-stack, two separated by a comma, " +
				"one of each family (`10.96.0.0/12,fd00:10:96::/112`, as kubeadm's `networking.serviceSubnet`)"},
		"networking.podCIDR": {Required: "no", Default: "`" + nodestate.DefaultPodCIDR + "`",
			Values: "a CIDR: an IPv4 or IPv6 address and a prefix length; or, dual-stack, two separated by a comma, " +
				"one of each family; or `none`: the controller-manager " +
				"allocates no node CIDRs (no `--allocate-node-cidrs`, `--cluster-cidr` or `--service-cluster-ip-range`), " +
				"the network plugin does, as kubeadm renders a cluster without `networking.podSubnet`"},
		"networking.dnsDomain": {Required: "no", Default: "`" + nodestate.DefaultDNSDomain + "`",
			Values: "a lowercase DNS name: the cluster's DNS domain (kubeadm's `networking.dnsDomain`); the service " +
				"account issuer is `https://kubernetes.default.svc.<dnsDomain>`"},
		"ports":                   {Required: "no", Default: "each field's default (kubeadm's ports)"},
		"ports.etcdClient":        portInfo(nodestate.DefaultEtcdClientPort),
		"ports.etcdPeer":          portInfo(nodestate.DefaultEtcdPeerPort),
		"ports.etcdMetrics":       portInfo(nodestate.DefaultEtcdMetricsPort),
		"ports.apiServer":         portInfo(nodestate.DefaultAPIServerPort),
		"ports.controllerManager": portInfo(nodestate.DefaultControllerManagerPort),
		"ports.scheduler":         portInfo(nodestate.DefaultSchedulerPort),
		"extraArgs": {
			Type:     "map of component to map of flag name to a string or a list of strings",
			Required: "no",
			Default:  "none: every component runs with the rendered flags only",
			Values: "keys: components the node runs; below each, flag names without the leading " +
				"dashes (lowercase letters, digits and `-`) and their values as strings (quote a " +
				"number: `\"10\"`). A flag given more than once takes a list of its values, in " +
				"command-line order, each written as `--flag=value` (kubeadm's v1beta4 `extraArgs` allow " +
				"it: two `service-account-issuer`, the first issuing, the other still accepted while " +
				"tokens rotate); a list of one value is that value, an empty list is refused. " +
				"A flag the renderer sets too takes this value, except etcd's " +
				"flags that other fields set, which are refused: " + ownedEtcdFlagList + ". A flag the " +
				"component's binary at its version does not accept, or refuses beside another, is " +
				"refused at render time ([versions.md](../versions.md#extra-args))",
		},
		"extraArgsOrder": {
			Type:     "map of component to list of flag names",
			Required: "no",
			Default:  "none: the extra args follow the rendered flags sorted by name",
			Values: "keys: components with extra args; each list names some of that component's `extraArgs`, each " +
				"once, or a flag with several values once per value: listed once, its values are together at that " +
				"place; listed once per value, each place takes the next value. The extra args follow the rendered flags on the command line (one that replaces a rendered flag " +
				"moves there too, as kubeadm's ArgumentsToCommand does) in this order, the unlisted ones after them by " +
				"name. `init --from-kubeadm` records kubeadm's order, since kubelet sees a reordered command line as a new pod",
		},
		"stopped": {
			Type:     "list of component names",
			Required: "no",
			Default:  "none: every component of the node runs",
			Values: "components the node has (`kube-vip` only with `vip`), each once. Written by " +
				"`stratum-upgrade stop` and `start` ([cli.md](../cli.md#stop-component----all---allow-control-plane-down)); " +
				"`apply --state` refuses a file whose list differs from the node's",
		},
		"adoptedInputs": {
			Type:     "map of component to string",
			Required: "no",
			Default:  "none: every pod carries the `stratum.ciq.com/inputs-sha256` annotation",
			Values: "keys: components the node has; values: sha256 digests in hex (64 characters). " +
				"Written by `stratum-upgrade init --from-kubeadm` ([adopting-kubeadm.md](../adopting-kubeadm.md)): " +
				"while a component's start-only input files still hash to its digest, its pod is rendered " +
				"without the annotation, as the adopted manifest had none, so adoption restarts nothing",
		},
		"extraVolumes": {
			Type:     "map of component to list of volumes",
			Required: "no",
			Default:  "none: each component mounts the rendered volumes only",
			Values: "keys: components the node runs; each volume has `name` (a DNS label, each once per component; " +
				"a rendered volume of that name, with its mount, is replaced, as kubeadm's `extraVolumes` do), `hostPath` " +
				"and `mountPath` (absolute paths without `..`, each mount path once), `readOnly` (default false: written) " +
				"and `pathType` (`DirectoryOrCreate`, `Directory`, `FileOrCreate`, `File`, `Socket`, `CharDevice`, " +
				"`BlockDevice`, or empty: no check, as kubeadm leaves it). Only that component mounts it; volumes and " +
				"mounts are sorted by name as kubeadm writes them (etcd's mounts: data, certificates, then these). A mount " +
				"path a rendered volume already has is refused at render time",
		},
		"extraEnvs": {
			Type:     "map of component to list of environment variables",
			Required: "no",
			Default:  "none: kubeadm's components run with no environment variables, kube-vip with its own",
			Values: "keys: components the node runs; each variable has `name` (a C-like identifier, also `.` and `-`; " +
				"each once per component) and `value`, or `valueFrom` with `fieldRef` or `resourceFieldRef` (not " +
				"`secretKeyRef` or `configMapKeyRef`: a static pod runs without the API server, which refuses a mirror " +
				"pod that references one). The container's environment is sorted by name, as kubeadm's " +
				"`MergeKubeadmEnvVars` writes it; kube-vip's keeps its order, a variable of the same name replaced in place",
		},
		"resources": {
			Type:     "map of component to resources",
			Required: "no",
			Default:  "kubeadm's: requests of cpu `100m` and memory `100Mi` for etcd, cpu `250m` for kube-apiserver, `200m` for kube-controller-manager, `100m` for kube-scheduler",
			Values: "keys: components the node runs; each has `requests` and `limits`, maps of a resource name (`cpu`, " +
				"`memory`, ...) to a quantity (`250m`, `1.5`, `128Mi`; not negative; a request not above its limit). " +
				"They replace the rendered resources whole, written as given",
		},
		"patches": {Required: "no", Default: "none"},
		"patches.directory": {Required: "no", Default: "none",
			Values: absPath + ": a kubeadm patches directory. Whoever loads the state file (`init`, `apply --state`, " +
				"`plan --state`) reads its files into `patches.files`, which the journal keeps: rendering never reads " +
				"the directory, so resume and rollback render what the transaction recorded, and a changed patch takes " +
				"effect when the state is applied again. Files kubeadm ignores (another extension, another target, " +
				"empty) and the patches of kubeadm's other targets (`kubeletconfiguration`, `corednsdeployment`, " +
				"`kubeproxydaemonset`) are left out; a name with `+` and an unknown type is refused"},
		"patches.files": {
			Type:     "list of patch files",
			Required: "no",
			Default:  "the files of `patches.directory`; else none",
			Values: "each has `name`, a clean relative path whose base name is kubeadm's " +
				"`<component>[suffix][+strategic|merge|json].{yaml,json}` for a component the node runs (each name " +
				"once), and `content`: one patch or several as YAML documents, a strategic merge patch (the default), " +
				"an RFC 7386 merge patch (`merge`) or an RFC 6902 JSON patch (`json`). They are applied in this order, " +
				"each to its component's rendered pod after the fields above and before stratum's annotations, with " +
				"kubeadm's libraries (apimachinery's strategicpatch, evanphx/json-patch v4). A patch that does not " +
				"apply, adds a field a Pod does not have, or changes the pod's or container's name, the image " +
				"(`images`) or the command line (`extraArgs`) is refused at render time. With `patches.directory` set, " +
				"a list that differs from the directory's files is refused when loaded",
		},
	},
}

// ownedEtcdFlagList is the etcd flags Validate refuses in extraArgs; the
// tests check that each is refused.
const ownedEtcdFlagList = "`data-dir`, `name`, `initial-cluster`, `initial-cluster-state`, " +
	"`initial-cluster-token`, `listen-client-urls`, `advertise-client-urls`, " +
	"`initial-advertise-peer-urls`, `listen-peer-urls`, `trusted-ca-file`, `cert-file` and `key-file`"
