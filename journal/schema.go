package journal

/*
Schema of the journal file, version 7 (the current one).

The journal is one bbolt file. Every key and value is listed here; nothing
else is stored. All integers are 8-byte big-endian, so that bbolt's byte
order is numeric order. All times are RFC 3339 with nanoseconds, in UTC.

	meta                          bucket
	    schema_version            uint64: the schema version of this file (7)
	    created_at                time the file was first initialised, as text

	state                         bucket
	    current                   the node state: YAML exactly as written by
	                              nodestate.(*NodeState).Marshal; read back
	                              with nodestate.Parse. Absent until the first
	                              PutNodeState or Commit.
	    manifest_dir              the absolute path of the manifest
	                              directory the node state is rendered into
	                              (PutManifestDir, set by `init`). Absent in
	                              a journal written before it was recorded.

	txns                          bucket; its bbolt sequence numbers txns
	    <txn id>                  JSON of Txn (field names in the json tags of
	                              Txn) plus "seq", the txns bucket sequence at
	                              Begin, which orders History. Ids look like
	                              20261202T130405Z-1a2b: the UTC time of Begin
	                              and 4 random hex digits. "targets" holds the
	                              exact bytes the txn writes (Target, File),
	                              fixed at Begin. "ignoredChecks" lists the
	                              pre-flight checks that failed and that the
	                              operator let through at Begin
	                              (IgnoredCheck: check, component, message).
	                              "snapshotDir", "source" and the "path" of
	                              "etcdBackup" are relative to the journal's
	                              directory (the state directory) when inside
	                              it, as snapshots/<id> (journal/paths.go).

	records                       bucket
	    <txn id>                  nested bucket, one per txn, created by Begin;
	                              its bbolt sequence numbers its records
	        <seq>                 uint64 1, 2, ... -> JSON of Record: "step"
	                              is one of Steps; "processes" (done),
	                              "asideDir" (etcd-restored), "etcdData"
	                              and "why" (etcd-data), "why", "procMark"
	                              and "stamp" (etcd-snapshot), "etcdTarget"
	                              and "why" (etcd-downgrade-enable), "why",
	                              "procMark" and "pods" (surge) are typed
	                              fields

	open                          bucket
	    txn                       id of the open transaction; absent when no
	                              transaction is open. Set by Begin, deleted in
	                              the same bbolt transaction that gives the txn
	                              a terminal phase (Commit, Finish).

Invariants, all kept by single bbolt transactions: at most one txn is open;
open/txn names it and its phase is open; a txn with a terminal phase has
Ended set and never changes again; state/current changes only through
PutNodeState (no txn open) or Commit.

state/manifest_dir came without a version bump: it is a new key in an
existing bucket that no older binary reads, writes or refuses (version 4
binaries leave the state bucket's other keys alone), and an absent key
reads as "not recorded", which is what every older file is. A version bump
would make every older binary refuse every newer file for a key it can
safely ignore.

Versions and migrations. A file with no meta bucket is version 0. Version 0
is the pre-release layout, written by builds before the journal was
versioned: a single bucket "nodestate" holding key "current" (the node state
YAML, same encoding as state/current today) and no transaction history. A
freshly created, empty bbolt file is also version 0 (with no buckets at
all) and goes through the same migration. A version-0 file with any bucket
other than "nodestate" is not a stratum journal and is refused.

Version 1 stored a record's payload in one untyped string, "note": the JSON
of the component's processes in a done record, the aside directory in an
etcd-restored record. Version 2 moves them into "processes" and "asideDir"
and refuses any step it does not know; version-1 txns have no "targets"
(the engine pins them when it resumes such a txn). Version 3 adds the step
"replaced" (kubelet replaced etcd, journaled before it answered); nothing
else changes, so its migration only moves the version, and a version-2
binary refuses a file that may hold the new step. Version 4 adds the txn
field "ignoredChecks"; no older txn has one, so its migration too only
moves the version, and a version-3 binary, which would drop the field when
it rewrites a txn, refuses the file. Version 5 adds the step "etcd-data"
(a rollback's decision about etcd's data, "etcdData" keep or restore and
"why", journaled before it stops etcd); no older file holds one, so its
migration only moves the version, and a version-4 binary, which would
ignore the decision and decide again on resume, refuses the file. Version 5
also adds the txn field "down" (the components that did not answer when the
transaction began, which its rollback does not demand back); it came in the
same release as etcd-data, and a version-4 binary, which would drop it when
it rewrites a txn, is refused by the same bump. Version 6 stores the
paths of a txn inside the state directory relative to it (paths.go), so
that a state directory restored onto another path still names its own
snapshots; its migration rewrites every txn's paths (one outside the
directory whose parent is named snapshots, left by a directory moved
before the migration, becomes snapshots/<name>), and a version-5 binary,
which would take the relative paths for paths of its working directory,
refuses the file. Version 7 adds the steps "etcd-answered" (the new etcd answered: it wrote
to the data) and "etcd-silent" (the wait for it ended without an answer,
watched from the old etcd's stop on), from which a rollback decides
whether etcd's data can be kept, the etcd-data decision "downgrade" and
the step "etcd-downgraded" (etcd's downgrade protocol moved the data back
a minor); no older file holds one, so its migration only moves the
version, and a version-6 binary, which would take every replaced etcd for
one that wrote, refuses the file. The step "etcd-snapshot" (the
forced etcd snapshot before etcd's own step, "why" forcing or covered)
came without a bump: every binary since version 2 refuses a record whose
step it does not know, so an older binary refuses such a transaction
rather than misread it, and files without one stay readable by it.
The step "etcd-downgrade-enable" ("etcdTarget", the minor etcd downgrades
to, and "why" enabling, cancelled or refused: this transaction enabled
etcd's downgrade, or cancelled it) came the same way, without a bump, and
so did the step "surge" ("why" writing, active or removed, "procMark" and
"pods": a component's new instance started beside the old under a second
static pod name).

migrations[i] takes a file from version i to i+1. Open runs every pending
migration, in order, in ONE bbolt transaction, and sets meta/schema_version
after each, so a crash leaves the file at its old version. A read-only Open
migrates nothing: it refuses a file that needs a migration. A file whose
version is newer than currentVersion is refused without writing anything:
it was written by a newer stratum-upgrade, and this binary cannot know what
the newer fields mean.
*/

import (
	"encoding/binary"
	"encoding/json"
	"fmt"
	"time"

	bolt "go.etcd.io/bbolt"
)

// currentVersion is the schema version this binary reads and writes.
const currentVersion = 7

// CurrentSchemaVersion is the journal schema version this binary writes and reads.
const CurrentSchemaVersion = currentVersion

// Bucket and key names of schema version 1.
var (
	bucketMeta    = []byte("meta")
	bucketState   = []byte("state")
	bucketTxns    = []byte("txns")
	bucketRecords = []byte("records")
	bucketOpen    = []byte("open")

	keySchemaVersion = []byte("schema_version")
	keyCreatedAt     = []byte("created_at")
	keyCurrent       = []byte("current")
	keyOpenTxn       = []byte("txn")
)

// Names of the version-0 (pre-release) layout.
var bucketV0NodeState = []byte("nodestate")

// migration takes a file from one schema version to the next, inside the
// bbolt transaction tx. It must not commit or roll back tx.
type migration struct {
	name string
	run  func(tx *bolt.Tx, now time.Time) error
}

// migrations[i] migrates version i to version i+1; len(migrations) must be
// currentVersion (checked by a test).
var migrations = []migration{
	{name: "v0 to v1: versioned layout with transactions", run: migrateV0toV1},
	{name: "v1 to v2: typed record steps and payloads", run: migrateV1toV2},
	{name: "v2 to v3: the replaced step", run: func(*bolt.Tx, time.Time) error { return nil }},
	{name: "v3 to v4: the ignored pre-flight checks of a txn", run: func(*bolt.Tx, time.Time) error { return nil }},
	{name: "v4 to v5: the etcd-data step and the txn field down", run: func(*bolt.Tx, time.Time) error { return nil }},
	{name: "v5 to v6: paths relative to the state directory", run: func(tx *bolt.Tx, _ time.Time) error { return migrateV5toV6(tx) }},
	{name: "v6 to v7: the etcd-answered, etcd-silent and etcd-downgraded steps", run: func(*bolt.Tx, time.Time) error { return nil }},
}

// migrateV0toV1 creates the version-1 buckets and moves the pre-release
// nodestate/current into state/current.
func migrateV0toV1(tx *bolt.Tx, now time.Time) error {
	var foreign []string
	if err := tx.ForEach(func(name []byte, _ *bolt.Bucket) error {
		if string(name) != string(bucketV0NodeState) {
			foreign = append(foreign, string(name))
		}
		return nil
	}); err != nil {
		return err
	}
	if len(foreign) > 0 {
		return fmt.Errorf("not a stratum-upgrade journal: it has no meta bucket but has bucket(s) %q", foreign)
	}
	meta, err := tx.CreateBucket(bucketMeta)
	if err != nil {
		return err
	}
	if err := meta.Put(keyCreatedAt, []byte(now.UTC().Format(time.RFC3339Nano))); err != nil {
		return err
	}
	for _, name := range [][]byte{bucketState, bucketTxns, bucketRecords, bucketOpen} {
		if _, err := tx.CreateBucket(name); err != nil {
			return fmt.Errorf("create bucket %s: %w", name, err)
		}
	}
	if old := tx.Bucket(bucketV0NodeState); old != nil {
		if v := old.Get(keyCurrent); v != nil {
			// Put keeps a reference to its value until commit; v points into
			// a page of the bucket deleted below, so copy it.
			if err := tx.Bucket(bucketState).Put(keyCurrent, clone(v)); err != nil {
				return err
			}
		}
		if err := tx.DeleteBucket(bucketV0NodeState); err != nil {
			return err
		}
	}
	return nil
}

// recordV1 is a version-1 record: today's fields but for the payload,
// which version 1 kept in Note.
type recordV1 struct {
	Record
	Note string `json:"note,omitempty"`
}

// migrateV1toV2 rewrites every record: a done record's note (the JSON of
// its processes) becomes Processes, an etcd-restored record's note (the
// aside directory) becomes AsideDir. A record with an unknown step, or a
// note where version 1 never wrote one, is refused: the file is not one
// this binary understands.
func migrateV1toV2(tx *bolt.Tx, _ time.Time) error {
	all := tx.Bucket(bucketRecords)
	if all == nil {
		return fmt.Errorf("no %s bucket", bucketRecords)
	}
	return all.ForEachBucket(func(id []byte) error {
		b := all.Bucket(id)
		type kv struct{ k, v []byte }
		var out []kv
		err := b.ForEach(func(k, v []byte) error {
			var r recordV1
			if err := json.Unmarshal(v, &r); err != nil {
				return fmt.Errorf("records/%s/%x: %w", id, k, err)
			}
			if !r.Step.Known() || r.Step == StepReplaced || r.Step == StepEtcdData || r.Step == StepEtcdAnswered || r.Step == StepEtcdSilent || r.Step == StepEtcdDowngraded || r.Step == StepEtcdDowngradeEnable {
				return fmt.Errorf("records/%s/%x: unknown step %q", id, k, r.Step)
			}
			switch {
			case r.Note == "":
			case r.Step == StepDone:
				if err := json.Unmarshal([]byte(r.Note), &r.Processes); err != nil {
					return fmt.Errorf("records/%s/%x: done note: %w", id, k, err)
				}
			case r.Step == StepEtcdRestored:
				r.AsideDir = r.Note
			default:
				return fmt.Errorf("records/%s/%x: step %s has a note %q, which version 1 never wrote", id, k, r.Step, r.Note)
			}
			nv, err := json.Marshal(r.Record)
			if err != nil {
				return err
			}
			out = append(out, kv{clone(k), nv})
			return nil
		})
		if err != nil {
			return err
		}
		for _, e := range out {
			if err := b.Put(e.k, e.v); err != nil {
				return err
			}
		}
		return nil
	})
}

// readVersion returns the schema version of the file tx reads: 0 without a
// meta bucket.
func readVersion(tx *bolt.Tx) (int, error) {
	meta := tx.Bucket(bucketMeta)
	if meta == nil {
		return 0, nil
	}
	v := meta.Get(keySchemaVersion)
	if len(v) != 8 {
		return 0, fmt.Errorf("meta/%s is %d bytes, want 8: the file is damaged", keySchemaVersion, len(v))
	}
	n := binary.BigEndian.Uint64(v)
	if n > 1<<31 {
		return 0, fmt.Errorf("meta/%s is %d: the file is damaged", keySchemaVersion, n)
	}
	return int(n), nil
}

// migrate runs migrations from version from to currentVersion in tx.
func migrate(tx *bolt.Tx, from int, now time.Time) error {
	for v := from; v < currentVersion; v++ {
		m := migrations[v]
		if err := m.run(tx, now); err != nil {
			return fmt.Errorf("migration %d (%s): %w", v, m.name, err)
		}
		if err := tx.Bucket(bucketMeta).Put(keySchemaVersion, u64(uint64(v+1))); err != nil {
			return fmt.Errorf("migration %d (%s): set version: %w", v, m.name, err)
		}
	}
	return nil
}

func u64(n uint64) []byte {
	b := make([]byte, 8)
	binary.BigEndian.PutUint64(b, n)
	return b
}

// clone copies b out of bbolt memory; nil stays nil.
func clone(b []byte) []byte {
	if b == nil {
		return nil
	}
	return append(make([]byte, 0, len(b)), b...)
}
