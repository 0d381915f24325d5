// Package etcddata backs up and restores the local etcd member's data: a
// consistent snapshot taken through the client's snapshot API before an
// upgrade changes etcd's image, and its restore into the member's data
// directory when a rollback needs it (single-member clusters only). The HA
// work adds membership here.
package etcddata
