// Command etcd is etcd's own server main, built from the go.etcd.io/etcd
// server module pinned in this directory's go.mod. It exists so the test bed
// runs a real etcd of a chosen minor version without a prebuilt binary; see
// internal/harness/etcdbuild.
package main

import (
	"os"

	"go.etcd.io/etcd/server/v3/etcdmain"
)

func main() { etcdmain.Main(os.Args) }
