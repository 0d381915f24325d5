package main

// The release's reference page: what engine.ParseRelease and
// Release.Apply do with each field, in operator terms.

import (
	"reflect"

	"github.com/ciq/stratum-upgrade/engine"
)

var releasePage = spec{
	File:  "release.md",
	Title: "Release reference",
	Pkg:   "engine",
	Type:  reflect.TypeFor[engine.Release](),
	Intro: `
A release is what an upgrade moves a node to: a Kubernetes version and the
image of each component it changes. ` + "`stratum-upgrade plan --to FILE`" + ` shows
what it would change and ` + "`stratum-upgrade run --to FILE`" + ` makes the change
([cli.md](../cli.md#plan---to-versionrelease----state-file---ignore-preflight-errors-name)). A
release is cluster-wide: the same file serves every control-plane node, and a
component a node does not run (kube-vip on a node without ` + "`vip`" + `) is ignored.

The file is YAML, decoded strictly: a field that is not below, or a value of
the wrong type, is an error. It is then applied to the node's
[node state](node-state.md): ` + "`kubernetesVersion`" + ` replaces the node's, each
image it names pins that component's (and drops the node's ` + "`versions`" + `
entry of the old image), a component the node does not pin moves with
` + "`kubernetesVersion`" + ` (its image is kubeadm's in the node's
` + "`imageRepository`" + `), and the result must be a valid node state whose
kube-apiserver runs at its ` + "`kubernetesVersion`" + `. Last, the
[pre-flight checks](../cli.md#pre-flight-checks) refuse an upgrade path that is
not allowed ([versions.md](../versions.md#upgrade-paths)). A release that
fails any of these changes nothing.`,
	Minimal:     "release-minimal.yaml",
	MinimalNote: "The required fields only: the version alone.",
	Full:        "release-full.yaml",
	FullNote:    "Every field set.",
	Fields: map[string]info{
		"apiVersion": {Required: "yes", Values: "`stratum.ciq.com/v1`"},
		"kind":       {Required: "yes", Values: "`Release`"},
		"kubernetesVersion": {Required: "yes",
			Values: "`v` and a semantic version, as the node state's " +
				"[`kubernetesVersion`](node-state.md#kubernetesversion): `v1.34.5`"},
		"images": {
			Type:     "map of component to string",
			Required: "no",
			Default: "none: every component keeps its pinned image, and one the node does not pin runs " +
				"from its `imageRepository` at `kubernetesVersion`",
			Values: "keys: `etcd`, `kube-apiserver`, `kube-controller-manager`, " +
				"`kube-scheduler` and `kube-vip`; values: an image reference, as in the node state's " +
				"[`images`](node-state.md#images)",
		},
		"versions": {
			Type:     "map of component to string",
			Required: "for `etcd` when the release names an etcd image whose tag is not a version",
			Default: "none: a named image's version is its tag's, and a Kubernetes component whose tag " +
				"is not a version runs at `kubernetesVersion`",
			Values: "keys: components the release names an image of; values: a version, as in the " +
				"node state's [`versions`](node-state.md#versions)",
		},
	},
}
