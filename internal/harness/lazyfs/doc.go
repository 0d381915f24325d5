// Package lazyfs is a power-loss test filesystem, after Jepsen's LazyFS:
// a FUSE loopback over a backing directory that keeps what a real disk
// would keep across a power cut and nothing more. Test harness only.
package lazyfs
