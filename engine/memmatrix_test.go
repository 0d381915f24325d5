package engine

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/ciq/stratum-upgrade/durable"
	"github.com/ciq/stratum-upgrade/etcddata"
	"github.com/ciq/stratum-upgrade/fault"
	"github.com/ciq/stratum-upgrade/internal/harness/kubeletmodel"
	"github.com/ciq/stratum-upgrade/internal/harness/standin"
	"github.com/ciq/stratum-upgrade/internal/harness/testbed"
	"github.com/ciq/stratum-upgrade/journal"
	"github.com/ciq/stratum-upgrade/manifest"
	"github.com/ciq/stratum-upgrade/nodestate"
	"github.com/ciq/stratum-upgrade/proc"
)

// The crash matrix in memory: the same points as TestCrashMatrix (and the
// points of a rollback --last), each crashed through the engine's crash
// hook instead of a SIGKILL, on a real manifest directory, a real journal
// and real snapshots, with the in-memory kubelet model instead of the
// kubelet stand-in and its processes. The real-binary matrix stays: it is
// what proves the model right.

var _ Processes = (*kubeletmodel.Kubelet)(nil)

// memDeadlines: the model never sleeps, so only the soak's length matters;
// at 1 ns the soak checks every component once and ends.
var memDeadlines = Deadlines{Replace: time.Minute, Active: time.Minute, Stop: time.Minute, Soak: time.Nanosecond, EtcdBackup: time.Minute}

var quiet = slog.New(slog.NewTextHandler(io.Discard, nil))

// memNode is a node on the model: the default node state made single-member
// (so a rollback restores etcd's data) with every directory in a temp dir,
// its manifests written by a real *manifest.Store, a journal holding its
// state, and the model kubelet over the manifest directory.
type memNode struct {
	t      *testing.T
	root   string
	st     *nodestate.NodeState
	store  *manifest.Store
	k      *kubeletmodel.Kubelet
	j      *journal.Journal
	etcd   *fakeEtcd
	events []string
	// etcdNeverReplaced says kubelet never acted on etcd's new manifest
	// (the test held it): its data must not be restored.
	etcdNeverReplaced bool
	// release and store2, when set, are a test's release and manifest
	// store for the transaction under test (TestIOErrorMatrix's rows).
	release *Release
	store2  Manifests
	// procs, when set, is what the engine sees processes through (a
	// wrapper of the model); else the model itself.
	procs Processes
	// onEvent, when set, sees every engine event as it happens.
	onEvent func(Event)
	// before is the manifest directory before the transaction under test.
	before map[string][]byte
	// etcdClient, when set, is Config.EtcdClient: how the engine reaches
	// "this node's" etcd (a plain-http etcdcluster member).
	etcdClient func(*nodestate.NodeState) etcddata.ClientConfig
}

func newMemNode(t *testing.T) *memNode {
	t.Helper()
	return newMemNodeVIP(t, false)
}

// newMemNodeVIP is newMemNode, with a VIP (so kube-vip, a component
// without a health endpoint, runs) when vip is set.
func newMemNodeVIP(t *testing.T, vip bool) *memNode {
	t.Helper()
	return newMemNodeAt(t, t.TempDir(), vip)
}

// newMemNodeAt is newMemNodeVIP with every directory of the node under
// root.
func newMemNodeAt(t *testing.T, root string, vip bool) *memNode {
	t.Helper()
	st, err := nodestate.Load(filepath.Join("..", "testdata", "states", "default.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	st.PKIDir = filepath.Join(root, "pki")
	st.KubeconfigDir = filepath.Join(root, "kube")
	st.ConfigDir = filepath.Join(root, "config")
	st.Etcd.DataDir = filepath.Join(root, "etcd")
	st.Etcd.InitialCluster = st.Etcd.MemberName + "=https://" + st.AdvertiseAddress + ":2380"
	st.Etcd.InitialClusterState = "new"
	if vip {
		st.VIP = &nodestate.VIP{Address: "10.0.0.10", Interface: "eth0"}
		st.Images[nodestate.KubeVIP] = testbed.ModeImage(nodestate.KubeVIP, testbed.KubeVIPTags[0], "")
	}
	store, err := manifest.Create(filepath.Join(root, "manifests"), manifest.Options{Logger: quiet})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := store.WriteAll(st); err != nil {
		t.Fatal(err)
	}
	k, err := kubeletmodel.New(store.Dir(), st.NodeName)
	if err != nil {
		t.Fatal(err)
	}
	n := &memNode{t: t, root: root, st: st, store: store, k: k}
	n.etcd = &fakeEtcd{k: k}
	n.openJournal()
	t.Cleanup(func() { n.j.Close() })
	if err := n.j.PutNodeState(st); err != nil {
		t.Fatal(err)
	}
	seedSingleMember(t, n.j, st.Etcd.MemberName)
	return n
}

// openJournal opens the journal with the model's boot id, as the product
// opens it with the host's.
func (n *memNode) openJournal() {
	n.t.Helper()
	j, err := journal.Open(filepath.Join(n.root, "state", "stratum.db"), journal.Options{BootID: func() (string, error) { return n.k.BootID(), nil }})
	if err != nil {
		n.t.Fatal(err)
	}
	n.j = j
}

// engine is a new Engine over the node, with crash as its crash hook.
func (n *memNode) engine(crash func(fault.Point)) *Engine {
	n.t.Helper()
	return n.engineWith(modelStore{n.store, n.k}, crash)
}

// engineWith is engine with store as the engine's manifest directory.
func (n *memNode) engineWith(store Manifests, crash func(fault.Point)) *Engine {
	n.t.Helper()
	var procs Processes = n.k
	if n.procs != nil {
		procs = n.procs
	}
	e, err := New(Config{Journal: n.j, Store: store, Scanner: procs, Snapshots: filepath.Join(n.root, "state", "snapshots"),
		Deadlines: memDeadlines, Etcd: n.etcd, Log: quiet, EtcdClient: n.etcdClient, Coordination: testCoordination, Events: func(ev Event) {
			n.events = append(n.events, fmt.Sprintf("%s %s %s: %s", ev.Phase, ev.Step, ev.Component, ev.Message))
			if n.onEvent != nil {
				n.onEvent(ev)
			}
		}})
	if err != nil {
		n.t.Fatal(err)
	}
	e.crash = crash
	return e
}

// manifests is every entry of the manifest directory, hidden ones included.
func (n *memNode) manifests() map[string][]byte {
	n.t.Helper()
	out := map[string][]byte{}
	entries, err := os.ReadDir(n.store.Dir())
	if err != nil {
		n.t.Fatal(err)
	}
	for _, e := range entries {
		b, err := os.ReadFile(filepath.Join(n.store.Dir(), e.Name()))
		if err != nil {
			n.t.Fatal(err)
		}
		out[e.Name()] = b
	}
	return out
}

// modelStore is the real manifest store whose Stop waits on the model: the
// store's own Stop waits with its *proc.Scanner.
type modelStore struct {
	*manifest.Store
	k *kubeletmodel.Kubelet
}

func (s modelStore) Stop(ctx context.Context, st *nodestate.NodeState, name string, timeout time.Duration) error {
	t, err := manifest.Target(st, name)
	if err != nil {
		return err
	}
	if _, err := s.Remove(name); err != nil {
		return fmt.Errorf("stop %s: %w", name, err)
	}
	if err := s.k.WaitGone(ctx, t, timeout); err != nil {
		return fmt.Errorf("stop %s: %w", name, err)
	}
	return nil
}

// fakeEtcd stands in for etcd's data: a backup is a small file, a restore
// is counted, and one done while an etcd process runs is recorded as a
// fault.
type fakeEtcd struct {
	k          *kubeletmodel.Kubelet
	backups    int
	restores   int
	downgrades int
	// refuse, when set, is what every Downgrade fails with (etcd refused
	// it): the rollback falls back to the backup.
	refuse error
	// refuseAfterEnable, when set, is what every Downgrade fails with
	// after it enabled the downgrade (the storage version wait ran out).
	refuseAfterEnable error
	cancels           int
	faults            []string
	// enabled is the minor of the downgrade etcd has enabled ("" none):
	// a Downgrade to it only waits, as etcd's does.
	enabled string
	// cancelFails, when set, is what every CancelDowngrade fails with
	// (the downgrade stays enabled).
	cancelFails error
}

// fakeRevision is the revision the fake etcd reports: the backup's (7)
// plus the writes since.
const fakeRevision = 49

func (f *fakeEtcd) Downgrade(_ context.Context, st *nodestate.NodeState, target string, _ time.Duration, enabling func(bool) error) (etcddata.Downgraded, error) {
	t, err := manifest.Target(st, nodestate.Etcd)
	if err != nil {
		return etcddata.Downgraded{}, err
	}
	if !f.k.Active(context.Background(), t) {
		f.faults = append(f.faults, "etcd's data downgraded while the new etcd does not answer")
	}
	if f.enabled != target {
		if enabling != nil {
			if err := enabling(false); err != nil {
				return etcddata.Downgraded{}, err
			}
		}
		if f.refuse != nil {
			return etcddata.Downgraded{Revision: fakeRevision}, f.refuse
		}
		f.enabled = target
		if enabling != nil {
			if err := enabling(true); err != nil {
				return etcddata.Downgraded{Enabled: true}, err
			}
		}
	}
	if f.refuseAfterEnable != nil {
		return etcddata.Downgraded{Revision: fakeRevision, Enabled: true}, f.refuseAfterEnable
	}
	f.downgrades++
	return etcddata.Downgraded{StorageVersion: target + ".0", Revision: fakeRevision}, nil
}

func (f *fakeEtcd) CancelDowngrade(context.Context, *nodestate.NodeState, string) error {
	f.cancels++
	if f.cancelFails != nil {
		return f.cancelFails
	}
	f.enabled = ""
	return nil
}

func (f *fakeEtcd) Revision(context.Context, *nodestate.NodeState) (int64, error) {
	return fakeRevision, nil
}

func (f *fakeEtcd) Backup(_ context.Context, _ *nodestate.NodeState, path string) (*etcddata.Backup, error) {
	data := []byte("fake etcd snapshot\n")
	// Durable, as etcddata.Take makes the real backup.
	if err := durable.MkdirAll(filepath.Dir(path), 0o700); err != nil {
		return nil, err
	}
	if _, err := durable.WriteFile(path, data, 0o600); err != nil {
		return nil, err
	}
	f.backups++
	sum := sha256.Sum256(data)
	return &etcddata.Backup{Path: path, SHA256: hex.EncodeToString(sum[:]), Size: int64(len(data)), Revision: 7, MemberID: "1", Members: 1, Version: "3.5.35", Taken: time.Now()}, nil
}

func (f *fakeEtcd) CheckRestore(*nodestate.NodeState, *etcddata.Backup, string, int) error {
	return nil
}

func (f *fakeEtcd) Restore(context.Context, *nodestate.NodeState, *etcddata.Backup, string, int) error {
	f.restores++
	if ps, err := f.k.PIDs("etcd"); err != nil || len(ps) > 0 {
		f.faults = append(f.faults, fmt.Sprintf("etcd's data restored while etcd runs: %v %v", ps, err))
	}
	return nil
}

// crashed is the panic of the crash hook: the engine "dies" at point.
type crashed struct{ point fault.Point }

// crashAt is a crash hook that panics at the first hit of p, and notes it.
func crashAt(p fault.Point, fired *bool) func(fault.Point) {
	return func(q fault.Point) {
		if q == p && !*fired {
			*fired = true
			panic(crashed{q})
		}
	}
}

// survive runs fn, recovering the crash hook's panic (any other panic goes
// on), and returns the error fn returned when it was not crashed.
func survive(fn func() error) (err error, died bool) {
	defer func() {
		if r := recover(); r != nil {
			if _, ok := r.(crashed); !ok {
				panic(r)
			}
			died = true
		}
	}()
	return fn(), false
}

// crash is what a crash at a point leaves: the process dies (the journal
// is closed, as the kernel releases its lock), and in a reboot every pod
// dies too and the model starts them again from the files on disk, in a
// new boot. Then the journal is opened again, in the new boot. (Data the
// engine did not make durable survives: TestPowerLossMatrix loses it.)
func (n *memNode) crash(reboot bool) {
	n.t.Helper()
	if err := n.j.Close(); err != nil {
		n.t.Fatal(err)
	}
	if reboot {
		if err := n.k.Reboot(); err != nil {
			n.t.Fatal(err)
		}
	}
	n.openJournal()
}

// converged lists every way the node is not converged to want: a
// transaction open; the last one ended otherwise; the journal's node state
// is not the transaction's target (committed) or origin (rolled back); the
// manifest directory holds anything but the roster's manifests (a hidden
// staging file included); a manifest is not the render of the node state
// (committed) or not the snapshot's but for restarted-at (rolled back); a
// component's running pod is not the one of its file now on disk (a stale
// process), or it has no process, or a process of its binary belongs to
// another pod, or it is not active; etcd's data was restored while etcd ran,
// or not restored by a rollback that rewrote etcd, or restored by a commit.
func (n *memNode) converged(want Outcome) []string {
	var bad []string
	badf := func(format string, args ...any) { bad = append(bad, fmt.Sprintf(format, args...)) }
	if open, err := n.j.OpenTxn(); err != nil || open != nil {
		phase := journal.Phase("")
		if open != nil {
			phase = open.Phase
		}
		badf("a transaction is still open (phase %s, err %v)", phase, err)
	}
	hist, err := n.j.History(1)
	if err != nil || len(hist) != 1 {
		return append(bad, fmt.Sprintf("history: %v %v", hist, err))
	}
	last := hist[0]
	if string(last.Phase) != string(want) {
		badf("last transaction %s (%s) ended %s (%s), want %s", last.ID, last.Kind, last.Phase, last.Reason, want)
	}
	st, err := n.j.NodeState()
	if err != nil {
		return append(bad, err.Error())
	}
	end := last.To
	if want != Committed {
		end = last.From
	}
	if cur, _ := st.Marshal(); !bytes.Equal(cur, end) {
		badf("the journal's node state is not the transaction's %s state", map[bool]string{true: "target", false: "origin"}[want == Committed])
	}
	prof, err := manifest.LoadProfile(st)
	if err != nil {
		return append(bad, err.Error())
	}
	roster := manifest.NamesFor(st)
	now := n.manifests()
	for name := range now {
		if comp, ok := manifest.ManifestName(name); !ok || !slices.Contains(roster, comp) {
			badf("the manifest directory holds %s, which is no roster manifest", name)
		}
	}
	etcdWritten := slices.Contains(last.Changed, nodestate.Etcd)
	for _, comp := range roster {
		got, ok := now[manifest.FileName(comp)]
		if !ok {
			badf("%s has no manifest", comp)
			continue
		}
		pod, err := manifest.DecodePod(got)
		if err != nil {
			badf("%s: %v", comp, err)
			continue
		}
		switch want {
		case Committed:
			if render, _ := manifest.RenderBytes(st, prof, comp, manifest.RestartedAt(pod)); !bytes.Equal(render, got) {
				badf("%s is not the render of the committed node state", comp)
			}
		default:
			old := n.before[manifest.FileName(comp)]
			a, _ := manifest.SetRestartedAt(old, "")
			b, _ := manifest.SetRestartedAt(got, "")
			if !bytes.Equal(a, b) {
				badf("%s differs from the snapshot's beyond restarted-at", comp)
			} else if !slices.Contains(last.Changed, comp) && !etcdWritten && !bytes.Equal(old, got) {
				badf("%s was not written by the transaction but differs after the rollback", comp)
			}
		}
	}
	pods, err := n.k.Pods()
	if err != nil {
		return append(bad, err.Error())
	}
	if len(pods) != len(roster) {
		badf("the model runs %d pods, want the %d of the roster", len(pods), len(roster))
	}
	ctx := context.Background()
	for _, comp := range roster {
		path := n.store.Path(comp)
		uid, err := n.k.UID(path)
		if err != nil {
			badf("%s: %v", comp, err)
			continue
		}
		tg, _ := manifest.Target(st, comp)
		var mine, all []string
		for _, p := range pods {
			for _, pr := range p.Processes {
				if pr.Binary != tg.Binary {
					continue
				}
				all = append(all, fmt.Sprint(pr.Process))
				if p.File == path && p.UID == uid {
					mine = append(mine, fmt.Sprint(pr.Process))
				}
			}
		}
		switch {
		case len(mine) == 0:
			badf("%s: no process runs the pod of its manifest on disk (uid %.8s); its processes: %v", comp, uid, all)
		case len(all) != len(mine):
			badf("%s: stale processes: %v run, only %v are of its manifest on disk", comp, all, mine)
		}
		if !n.k.Active(ctx, tg) {
			badf("%s is not active", comp)
		}
	}
	bad = append(bad, n.etcd.faults...)
	// A newer etcd minor wrote to the data when the transaction journaled
	// its answer: then a rollback must not keep the data. One that never
	// answered (journaled silent) wrote nothing: the data is kept.
	etcdAnswered, etcdSilent := false, false
	if recs, err := n.j.Records(last.ID); err == nil {
		for _, r := range recs {
			etcdAnswered = etcdAnswered || r.Step == journal.StepEtcdAnswered && r.Component == nodestate.Etcd
			etcdSilent = etcdSilent || r.Step == journal.StepEtcdSilent && r.Component == nodestate.Etcd
		}
	}
	switch {
	case want == Committed && n.etcd.restores > 0 && last.Kind == journal.KindUpgrade:
		badf("etcd's data was restored %d times by a transaction that committed", n.etcd.restores)
	case want == RolledBack && etcdAnswered && etcdMinorMoved(last) && len(last.EtcdBackup) > 0 && n.etcd.restores == 0 && n.etcd.downgrades == 0:
		badf("the rollback of an upgrade whose newer etcd minor answered never restored etcd's data, nor downgraded it")
	case n.etcd.restores > 0 && n.etcd.refuse == nil && etcdDowngraded(n.j, last.ID):
		badf("etcd's data was restored %d times after it was downgraded", n.etcd.restores)
	case etcdSilent && !etcdAnswered && n.etcd.restores > 0:
		badf("etcd's data was restored %d times, although the new etcd never answered", n.etcd.restores)
	case n.etcdNeverReplaced && n.etcd.restores > 0:
		badf("etcd's data was restored %d times, although no newer etcd ever ran on it", n.etcd.restores)
	}
	return bad
}

// etcdDowngraded reports whether transaction id journaled etcd's data
// downgraded.
func etcdDowngraded(j *journal.Journal, id string) bool {
	recs, _ := j.Records(id)
	for _, r := range recs {
		if r.Step == journal.StepEtcdDowngraded {
			return true
		}
	}
	return false
}

// etcdMinorMoved reports whether txn moved etcd to another minor.
func etcdMinorMoved(txn journal.Txn) bool {
	from, err1 := nodestate.Parse(txn.From)
	to, err2 := nodestate.Parse(txn.To)
	if err1 != nil || err2 != nil {
		return true
	}
	_, _, moves := etcdMinors(&run{from: from, to: to})
	return moves
}

// memScenario is one transaction the matrix crashes at each of its points.
type memScenario struct {
	name   string
	points []fault.Point
	// notOnPath lists, with the reason, points the transaction does not
	// pass; any other point that does not fire fails the case.
	notOnPath map[fault.Point]string
	want      Outcome
	// setup runs before the transaction, on an engine without a hook.
	setup func(t *testing.T, n *memNode)
	run   func(ctx context.Context, e *Engine, n *memNode) (Result, error)
	// verify, if set, says what else is wrong once the case converged.
	verify func(n *memNode) []string
}

func memScenarios(st *nodestate.NodeState) []memScenario {
	roster := manifest.NamesFor(st)
	// commitUpgrade commits an upgrade that leaves etcd as it is (the
	// rollback --last of one that moves it is rollback-last-etcd-down).
	commitUpgrade := func(t *testing.T, n *memNode) {
		t.Helper()
		if res, err := n.engine(nil).Run(t.Context(), release(n.st, false, "", ""), nil); err != nil || res.Outcome != Committed {
			t.Fatalf("setup upgrade: %+v %v", res, err)
		}
	}
	noEtcd := map[fault.Point]string{}
	for _, s := range fault.Steps {
		noEtcd[s.Of(nodestate.Etcd)] = "the upgrade it undoes left etcd as it was, so etcd is not in its plan"
	}
	noEtcd[fault.AfterEtcdAnswered] = noEtcd[fault.Steps[0].Of(nodestate.Etcd)]
	// An upgrade whose new etcd never answers fails at etcd, the first
	// component: its rollback restarts etcd alone, and keeps etcd's data.
	silent := map[fault.Point]string{
		fault.AfterEtcdDowngrade: "the new etcd never answered: etcd's data is kept, not downgraded",
		fault.AfterEtcdStop:      "the new etcd never answered: etcd's data is kept, so the rollback never stops etcd to restore it",
		fault.AfterEtcdRestore:   "the new etcd never answered: etcd's data is kept, not restored",
	}
	for _, comp := range roster {
		for _, s := range fault.Steps {
			if comp != nodestate.Etcd {
				silent[s.InRollback(comp)] = "the upgrade failed at etcd, before " + comp + " was written: the rollback does not restart it"
			}
		}
	}
	lastApplies := map[fault.Point]string{fault.AfterEtcdBackup: "a rollback --last takes no etcd backup: etcd's data after a commit holds writes the snapshot does not"}
	for p, why := range noEtcd {
		lastApplies[p] = why
	}
	lastRollsBack := map[fault.Point]string{
		fault.AfterEtcdDowngrade: "the rollback-last did not rewrite etcd: etcd's data is not downgraded",
		fault.AfterEtcdStop:      "the rollback-last did not rewrite etcd, and has no etcd backup: etcd's data is not restored",
		fault.AfterEtcdRestore:   "the rollback-last did not rewrite etcd, and has no etcd backup: etcd's data is not restored",
	}
	for _, s := range fault.Steps {
		lastRollsBack[s.InRollback(nodestate.Etcd)] = "etcd was not written and its data not restored, so the rollback does not restart it"
	}
	// An upgrade that fails at kube-scheduler never writes kube-vip, which
	// comes after it, so its rollback does not restart it.
	failing := map[fault.Point]string{}
	if slices.Contains(roster, nodestate.KubeVIP) {
		for _, s := range fault.Steps {
			failing[s.InRollback(nodestate.KubeVIP)] = "kube-vip comes after the failing kube-scheduler in roster order: it was never written, and the rollback does not restart it"
			lastRollsBack[s.InRollback(nodestate.KubeVIP)] = failing[s.InRollback(nodestate.KubeVIP)]
		}
	}
	// Its newer etcd answered: its data goes back by etcd's downgrade
	// protocol, not by the backup, unless etcd refuses the downgrade.
	downgrades := maps.Clone(failing)
	downgrades[fault.AfterEtcdStop] = "etcd 3.6 answers, so etcd's downgrade protocol keeps its data: the rollback never stops etcd to restore it"
	downgrades[fault.AfterEtcdRestore] = downgrades[fault.AfterEtcdStop]
	restores := maps.Clone(failing)
	restores[fault.AfterEtcdDowngrade] = "etcd refuses the downgrade: the rollback restores the backup instead"
	// etcd's step, the first, fails: the rollback --last wrote nothing.
	downFails := maps.Clone(lastRollsBack)
	for _, comp := range roster {
		for _, s := range fault.Steps {
			if _, ok := downFails[s.InRollback(comp)]; !ok {
				downFails[s.InRollback(comp)] = "etcd's step, the first, failed before its write: " + comp + " was never written, and the rollback does not restart it"
			}
		}
	}
	// The surge scenarios start from a node whose API-serving components
	// run with --permit-port-sharing, as after an upgrade (issue 41).
	surging := []string{nodestate.KubeAPIServer, nodestate.ControllerManager, nodestate.Scheduler}
	portSharing := func(t *testing.T, n *memNode) {
		t.Helper()
		st := n.st.Clone()
		for _, comp := range surging {
			withPortSharing(st, comp)
		}
		if res, err := n.engine(nil).Apply(t.Context(), st, UpgradeOptions{}); err != nil || res.Outcome != Committed {
			t.Fatalf("setup: port sharing on: %+v %v", res, err)
		}
	}
	// The scheduler's surge copy never answers: the rollback removes it;
	// its canonical manifest was never written, so it is not restarted.
	surgeFails := maps.Clone(downgrades)
	for _, s := range fault.Steps {
		surgeFails[s.InRollback(nodestate.Scheduler)] = "the scheduler's surge copy never answered, so its canonical manifest was never written: the rollback does not restart it"
	}
	noSurgeLeft := func(n *memNode) []string {
		if left, err := n.store.SurgeFiles(); err != nil || len(left) > 0 {
			return []string{fmt.Sprintf("surge copies left in the manifest directory: %v %v", left, err)}
		}
		return nil
	}
	// A crash right after the failing copy is written: resume clears
	// that surge and surges again, and the rollback must clear the second
	// copy too (a power-cut case found it left behind: the first clear's
	// record hid the second surge).
	surgeRollback := append([]fault.Point{fault.AfterSurgeWrite.Of(nodestate.Scheduler), fault.AfterSurgeRemoved.InRollback(nodestate.Scheduler)}, fault.RollbackPoints(roster)...)
	return []memScenario{
		{
			name:   "upgrade",
			points: fault.UpgradePoints(roster),
			want:   Committed,
			run: func(ctx context.Context, e *Engine, n *memNode) (Result, error) {
				return e.Run(ctx, release(n.st, true, "", ""), nil)
			},
		},
		{
			name:      "rollback",
			points:    fault.RollbackPoints(roster),
			notOnPath: downgrades,
			want:      RolledBack,
			run: func(ctx context.Context, e *Engine, n *memNode) (Result, error) {
				return e.Run(ctx, release(n.st, true, nodestate.Scheduler, standin.ModeNeverListen), nil)
			},
		},
		{
			// etcd refuses the downgrade: the backup is the last resort.
			name:      "rollback-restore",
			points:    fault.RollbackPoints(roster),
			notOnPath: restores,
			want:      RolledBack,
			setup: func(t *testing.T, n *memNode) {
				n.etcd.refuse = fmt.Errorf("%w: the test refuses it", etcddata.ErrDowngradeRefused)
			},
			run: func(ctx context.Context, e *Engine, n *memNode) (Result, error) {
				return e.Run(ctx, release(n.st, true, nodestate.Scheduler, standin.ModeNeverListen), nil)
			},
		},
		{
			// The new etcd starts and exits at once, never answering:
			// the rollback keeps etcd's data (issue 30).
			name:      "etcd-silent",
			points:    fault.EtcdSilentPoints(roster),
			notOnPath: silent,
			want:      RolledBack,
			setup: func(t *testing.T, n *memNode) {
				n.k.SetImageMode(etcd36, standin.ModeExitAtStart)
			},
			run: func(ctx context.Context, e *Engine, n *memNode) (Result, error) {
				return e.Run(ctx, release(n.st, true, "", ""), nil)
			},
		},
		{
			name:      "rollback-last",
			points:    fault.UpgradePoints(roster),
			notOnPath: lastApplies,
			want:      Committed,
			setup:     commitUpgrade,
			run: func(ctx context.Context, e *Engine, n *memNode) (Result, error) {
				return e.RollbackLast(ctx)
			},
		},
		{
			// The undo of an upgrade that moved etcd 3.5 -> 3.6: its etcd
			// step first downgrades etcd's data with etcd's protocol
			// (journaled etcd-downgraded before etcd's mark, issue 30).
			name:      "rollback-last-etcd-down",
			points:    fault.EtcdDownPoints(roster),
			notOnPath: map[fault.Point]string{fault.AfterEtcdBackup: lastApplies[fault.AfterEtcdBackup]},
			want:      Committed,
			setup: func(t *testing.T, n *memNode) {
				t.Helper()
				if res, err := n.engine(nil).Run(t.Context(), release(n.st, true, "", ""), nil); err != nil || res.Outcome != Committed {
					t.Fatalf("setup upgrade to etcd 3.6: %+v %v", res, err)
				}
			},
			run: func(ctx context.Context, e *Engine, n *memNode) (Result, error) {
				return e.RollbackLast(ctx)
			},
			verify: func(n *memNode) []string {
				last, err := n.j.History(1)
				if err != nil || len(last) == 0 || !etcdDowngraded(n.j, last[0].ID) || n.etcd.downgrades == 0 {
					return []string{fmt.Sprintf("the rollback --last put etcd 3.5 back without etcd's downgrade (%d downgrades, %v)", n.etcd.downgrades, err)}
				}
				return nil
			},
		},
		{
			// The undo of an upgrade that moved etcd 3.5 -> 3.6, whose
			// downgrade etcd enabled but whose storage version never
			// moved: the step fails before etcd's manifest is written,
			// and the downgrade this transaction enabled is cancelled
			// (issue 37), whatever crash comes in between.
			name:      "rollback-last-etcd-down-fails",
			points:    fault.EtcdDownFailPoints(roster),
			notOnPath: downFails,
			want:      RolledBack,
			setup: func(t *testing.T, n *memNode) {
				t.Helper()
				if res, err := n.engine(nil).Run(t.Context(), release(n.st, true, "", ""), nil); err != nil || res.Outcome != Committed {
					t.Fatalf("setup upgrade to etcd 3.6: %+v %v", res, err)
				}
				n.etcd.refuseAfterEnable = fmt.Errorf("%w: the storage version never moved", etcddata.ErrDowngradeUnanswered)
			},
			run: func(ctx context.Context, e *Engine, n *memNode) (Result, error) {
				return e.RollbackLast(ctx)
			},
			verify: func(n *memNode) []string {
				if n.etcd.enabled != "" {
					return []string{fmt.Sprintf("etcd's downgrade to %s, which the rollback --last enabled, was left enabled", n.etcd.enabled)}
				}
				return nil
			},
		},
		{
			name:      "restart",
			points:    fault.UpgradePoints(roster),
			notOnPath: map[fault.Point]string{fault.AfterEtcdBackup: "a restart takes no etcd backup: the same etcd runs on its data"},
			want:      Committed,
			run: func(ctx context.Context, e *Engine, n *memNode) (Result, error) {
				return e.Restart(ctx, nil)
			},
		},
		{
			name:   "stop",
			points: verbPoints(nodestate.Scheduler, fault.AfterReplaced),
			want:   Committed,
			run: func(ctx context.Context, e *Engine, n *memNode) (Result, error) {
				return e.Stop(ctx, []string{nodestate.Scheduler}, StopOptions{})
			},
		},
		{
			name:   "start",
			points: verbPoints(nodestate.Scheduler),
			want:   Committed,
			setup: func(t *testing.T, n *memNode) {
				t.Helper()
				if res, err := n.engine(nil).Stop(t.Context(), []string{nodestate.Scheduler}, StopOptions{}); err != nil || res.Outcome != Committed {
					t.Fatalf("setup stop: %+v %v", res, err)
				}
			},
			run: func(ctx context.Context, e *Engine, n *memNode) (Result, error) {
				return e.Start(ctx, []string{nodestate.Scheduler})
			},
		},
		{
			// The scheduler the rollback --last puts back does not listen
			// (its image was broken since): the rollback-last rolls back to
			// the upgraded node.
			name:      "rollback-last-rolls-back",
			points:    fault.RollbackPoints(roster),
			notOnPath: lastRollsBack,
			want:      RolledBack,
			setup: func(t *testing.T, n *memNode) {
				old := n.st.Images[nodestate.Scheduler]
				commitUpgrade(t, n)
				n.k.SetImageMode(old, standin.ModeNeverListen)
			},
			run: func(ctx context.Context, e *Engine, n *memNode) (Result, error) {
				return e.RollbackLast(ctx)
			},
		},
		{
			name:   "surge-upgrade",
			points: fault.SurgeUpgradePoints(roster, surging),
			want:   Committed,
			setup:  portSharing,
			run: func(ctx context.Context, e *Engine, n *memNode) (Result, error) {
				return e.Run(ctx, release(n.st, true, "", ""), nil)
			},
			verify: noSurgeLeft,
		},
		{
			name:      "surge-rollback",
			points:    surgeRollback,
			notOnPath: surgeFails,
			want:      RolledBack,
			setup:     portSharing,
			run: func(ctx context.Context, e *Engine, n *memNode) (Result, error) {
				return e.Run(ctx, release(n.st, true, nodestate.Scheduler, standin.ModeNeverListen), nil)
			},
			verify: noSurgeLeft,
		},
	}
}

// verbPoints is every point of a stop or start of comp alone: no etcd
// backup, comp's steps but those in skip (a stop passes no after-replaced:
// it waits for the process to go).
func verbPoints(comp string, skip ...fault.Step) []fault.Point {
	pts := []fault.Point{fault.AfterBegin, fault.AfterSnapshot}
	for _, s := range fault.Steps {
		if !slices.Contains(skip, s) {
			pts = append(pts, s.Of(comp))
		}
	}
	return append(pts, fault.AfterApply, fault.BeforeCommit, fault.AfterCommit)
}

// knownDefects are cases that do not converge because of an engine defect,
// skipped with the description (scenario/variant/point -> defect), on
// every node. STRATUM_MEMMATRIX_DEFECTS=1 runs them (and so fails). None is
// known today; the map stays so that a defect found is listed, not hidden.
var knownDefects = map[string]string{}

// memCase runs one case on node n: the scenario's transaction crashed at
// pt, then after (what the crash does to the node: the process dies; a
// reboot; a power loss), Resume by a new Engine over the same directories,
// and the convergence check. It returns the problems after reports and
// those of the check.
func memCase(t *testing.T, n *memNode, sc memScenario, pt fault.Point, after func(n *memNode) []string) []string {
	t.Helper()
	ctx := t.Context()
	if sc.setup != nil {
		sc.setup(t, n)
	}
	n.before = n.manifests()
	fired := false
	_, died := survive(func() error {
		_, err := sc.run(ctx, n.engine(crashAt(pt, &fired)), n)
		return err
	})
	why, listed := sc.notOnPath[pt]
	switch {
	case !died && !listed:
		t.Errorf("the transaction never reached %s: the point is not on its path (list it in notOnPath with the reason if that is right)", pt)
		return nil
	case died && listed:
		t.Errorf("%s is listed as not on the path (%s) but the transaction reached it", pt, why)
	case !died:
		t.Logf("not on the path: %s", why)
	}
	problems := after(n)
	res, err := n.engine(nil).Resume(ctx)
	switch {
	case res.Outcome == Nothing && err == nil:
	case sc.want == Committed && (err != nil || res.Outcome != Committed):
		t.Errorf("Resume: %+v %v", res, err)
	case sc.want == RolledBack && (!errors.Is(err, ErrRolledBack) || res.Outcome != RolledBack):
		t.Errorf("Resume: %+v %v", res, err)
	}
	problems = append(problems, n.converged(sc.want)...)
	if sc.verify != nil {
		problems = append(problems, sc.verify(n)...)
	}
	if len(problems) > 0 || t.Failed() {
		t.Logf("engine events:\n%s\nmodel events:\n%s", strings.Join(n.events, "\n"), strings.Join(n.k.Events(), "\n"))
	}
	return problems
}

// TestMemMatrix is the crash matrix on the kubelet model: every point of an
// upgrade that commits, of one that rolls back (its kube-scheduler never
// listens), of a restart of every component, of a stop and a start of the
// scheduler, of a rollback --last, of one that moves etcd down a minor
// (etcd's downgrade first), and of a rollback --last that rolls back;
// each as a crash of stratum-upgrade alone and as a reboot; on the
// default node and on one with a VIP (kube-vip has no health endpoint).
// The default node runs every case; the VIP node, which differs by kube-vip
// alone, runs every case with STRATUM_MATRIX=full (make check) and else a
// sample, one point of each phase (sample_test.go), to keep make test quick.
func TestMemMatrix(t *testing.T) {
	t.Parallel() // beside the other matrices: most of a case is waiting
	start := time.Now()
	var times caseTimes
	// After every case: the subtests run in parallel.
	t.Cleanup(func() { t.Logf("%s, in %s", &times, time.Since(start).Round(time.Millisecond)) })
	s := newSampler("TestMemMatrix")
	for _, node := range []string{"default", "vip"} {
		t.Run(node, func(t *testing.T) {
			t.Parallel()
			vip := node == "vip"
			st := newMemNodeVIP(t, vip).st
			for _, sc := range memScenarios(st) {
				if vip {
					all := len(sc.points)
					sc.points = s.points(node+"/"+sc.name, sc.points, sc.notOnPath)
					s.logPicked(t, len(sc.points), all)
				}
				memMatrix(t, sc, vip, &times)
			}
		})
	}
}

// memMatrix runs scenario sc at each of its points, in both variants. The
// cases run in parallel: each is a node of its own, and a journal's fsyncs
// are most of what one waits for.
func memMatrix(t *testing.T, sc memScenario, vip bool, times *caseTimes) {
	t.Run(sc.name, func(t *testing.T) {
		t.Parallel()
		for _, variant := range []string{"crash", "reboot"} {
			t.Run(variant, func(t *testing.T) {
				t.Parallel()
				for _, pt := range sc.points {
					t.Run(string(pt), func(t *testing.T) {
						if d, ok := knownDefects[sc.name+"/"+variant+"/"+string(pt)]; ok && os.Getenv("STRATUM_MEMMATRIX_DEFECTS") == "" {
							t.Skip("known defect: " + d)
						}
						t.Parallel()
						t0 := time.Now()
						reboot := variant == "reboot"
						problems := memCase(t, newMemNodeVIP(t, vip), sc, pt, func(n *memNode) []string {
							n.crash(reboot)
							return nil
						})
						times.since(t0)
						for _, p := range problems {
							t.Error(p)
						}
					})
				}
			})
		}
	})
}

// TestMemModelServesTheEngine pins the model rules the engine's recovery
// relies on, through the engine's own store and journal.
func TestMemModelServesTheEngine(t *testing.T) {
	ctx := t.Context()
	sched := nodestate.Scheduler
	target := func(n *memNode, comp string) proc.Target {
		tg, err := manifest.Target(n.st, comp)
		if err != nil {
			t.Fatal(err)
		}
		return tg
	}
	mark := func(n *memNode) proc.Mark {
		m, err := n.k.Mark()
		if err != nil {
			t.Fatal(err)
		}
		if err := n.k.PastMark(ctx, m); err != nil {
			t.Fatal(err)
		}
		return m
	}
	t.Run("a write after a mark is a replacement after it", func(t *testing.T) {
		n := newMemNode(t)
		m := mark(n)
		if err := n.k.WaitReplaced(ctx, target(n, sched), m, time.Minute); err == nil {
			t.Fatal("replaced with nothing written")
		}
		to, _ := release(n.st, false, "", "").Apply(n.st)
		if err := n.store.Start(to, sched); err != nil {
			t.Fatal(err)
		}
		if err := n.k.WaitReplaced(ctx, target(n, sched), m, time.Minute); err != nil {
			t.Fatal(err)
		}
	})
	t.Run("the same bytes again restart nothing; a new restarted-at does", func(t *testing.T) {
		// Why a rollback journals its stamp before writing (a resumed
		// restore rewrites the same bytes, a no-op) and why a rollback
		// --last stamps the snapshot's bytes (they would be a UID kubelet
		// already ran).
		n := newMemNode(t)
		old, _ := n.store.Read(sched)
		stamp := n.store.Stamp()
		if changed, err := n.store.RestartAsIs(sched, stamp); err != nil || !changed {
			t.Fatalf("RestartAsIs: %v %v", changed, err)
		}
		m := mark(n)
		if changed, err := n.store.RestartAsIs(sched, stamp); err != nil || changed {
			t.Fatalf("RestartAsIs with the same stamp: %v %v", changed, err)
		}
		if err := n.k.WaitReplaced(ctx, target(n, sched), m, time.Minute); err == nil {
			t.Fatal("rewriting the same stamp replaced the pod")
		}
		if _, err := n.store.Put(sched, old); err != nil {
			t.Fatal(err)
		}
		if err := n.k.WaitReplaced(ctx, target(n, sched), m, time.Minute); err != nil {
			t.Fatalf("the stamp removed again: %v", err)
		}
	})
	t.Run("Stop waits until the process is gone", func(t *testing.T) {
		n := newMemNode(t)
		old, _ := n.store.Read(nodestate.Etcd)
		if err := (modelStore{n.store, n.k}).Stop(ctx, n.st, nodestate.Etcd, time.Minute); err != nil {
			t.Fatal(err)
		}
		if ps, _ := n.k.PIDs("etcd"); len(ps) != 0 {
			t.Fatalf("etcd runs after Stop: %v", ps)
		}
		if _, err := n.store.Put(nodestate.Etcd, old); err != nil {
			t.Fatal(err)
		}
		if err := n.k.WaitActive(ctx, target(n, nodestate.Etcd), time.Minute); err != nil {
			t.Fatal(err)
		}
	})
	t.Run("journal records carry the model's boot id, across a reboot", func(t *testing.T) {
		// verify() trusts a done record's identity only when its boot id is
		// the current mark's.
		n := newMemNode(t)
		txn, err := n.j.Begin(journal.Txn{Kind: journal.KindUpgrade, From: must(n.st.Marshal()), To: must(n.st.Marshal())})
		if err != nil {
			t.Fatal(err)
		}
		m1 := mark(n)
		n.crash(true)
		m2 := mark(n)
		if m1.BootID == m2.BootID {
			t.Fatal("the boot id did not change")
		}
		if _, err := n.j.Append(txn.ID, journal.PhaseApplying, journal.Record{Phase: journal.PhaseApplying, Step: journal.StepMark, Component: sched, ProcMark: &m2}); err != nil {
			t.Fatal(err)
		}
		recs, _ := n.j.Records(txn.ID)
		if len(recs) == 0 || recs[len(recs)-1].BootID != m2.BootID {
			t.Fatalf("records %+v: want the last in boot %s", recs, m2.BootID)
		}
		// A mark of the old boot counts every process as new.
		for _, comp := range manifest.NamesFor(n.st) {
			if err := n.k.WaitReplaced(ctx, target(n, comp), m1, time.Minute); err != nil {
				t.Errorf("%s: %v", comp, err)
			}
		}
	})
	t.Run("identity is steady for a healthy component and not for a crash loop", func(t *testing.T) {
		n := newMemNode(t)
		e := n.engine(nil)
		a, _ := e.identity(n.st, sched)
		if b, _ := e.identity(n.st, sched); !slices.Equal(a, b) || len(a) == 0 {
			t.Fatalf("a healthy scheduler's identity moved: %v -> %v", a, b)
		}
		to, _ := release(n.st, false, sched, standin.ModeCrashAfter).Apply(n.st)
		if err := n.store.Start(to, sched); err != nil {
			t.Fatal(err)
		}
		a, _ = e.identity(to, sched)
		if b, _ := e.identity(to, sched); slices.Equal(a, b) || !n.k.Active(ctx, target(n, sched)) {
			t.Fatalf("crash-after: identity %v -> %v (want a new process each look), active %v", a, b, n.k.Active(ctx, target(n, sched)))
		}
	})
}

// TestMemFailuresRollBack runs TestFailuresRollBack's failing components
// on the model: each failure mode is caught (crash-after only by the soak)
// and the upgrade rolls back to a converged node.
func TestMemFailuresRollBack(t *testing.T) {
	for _, c := range []struct {
		mode standin.Mode
		comp string
		want string
	}{
		{standin.ModeNeverListen, nodestate.Scheduler, "to answer on"},
		{standin.ModeExitAtStart, nodestate.ControllerManager, "to answer on"},
		{standin.ModeUnhealthy, nodestate.KubeAPIServer, "to answer on"},
		{standin.ModeCrashAfter, nodestate.Scheduler, "soak window"},
	} {
		t.Run(string(c.mode)+"-"+c.comp, func(t *testing.T) {
			n := newMemNode(t)
			n.before = n.manifests()
			res, err := n.engine(nil).Run(t.Context(), release(n.st, true, c.comp, c.mode), nil)
			if !errors.Is(err, ErrRolledBack) || !strings.Contains(res.Reason, c.comp) || !strings.Contains(res.Reason, c.want) {
				t.Fatalf("Run: %+v %v: want rolled back for %s (%q)", res, err, c.comp, c.want)
			}
			for _, p := range n.converged(RolledBack) {
				t.Error(p)
			}
		})
	}
}

// TestMemMatrixCanFail shows the matrix's check catches a node that did not
// converge: a resume skipped, a resume that journals a commit it did not
// apply, a resume that rolls back what should commit, a hidden staging
// file, a stray pod running a component's binary.
func TestMemMatrixCanFail(t *testing.T) {
	sc := memScenarios(mustState(t, testbed.Options{}))[0] // upgrade
	crashedAt := func(t *testing.T, pt fault.Point) *memNode {
		n := newMemNode(t)
		n.before = n.manifests()
		fired := false
		if _, died := survive(func() error {
			_, err := sc.run(t.Context(), n.engine(crashAt(pt, &fired)), n)
			return err
		}); !died {
			t.Fatalf("no crash at %s", pt)
		}
		n.crash(false)
		return n
	}
	expect := func(t *testing.T, problems []string, want ...string) {
		t.Helper()
		all := strings.Join(problems, "\n")
		for _, w := range want {
			if !strings.Contains(all, w) {
				t.Errorf("the check did not report %q; it reported:\n%s", w, all)
			}
		}
	}
	t.Run("no resume", func(t *testing.T) {
		n := crashedAt(t, fault.AfterWrite.Of(nodestate.KubeAPIServer))
		expect(t, n.converged(Committed), "a transaction is still open", "etcd is not the render of the committed node state")
	})
	t.Run("a resume that commits without applying", func(t *testing.T) {
		n := crashedAt(t, fault.AfterWrite.Of(nodestate.KubeAPIServer))
		open, err := n.j.OpenTxn()
		if err != nil || open == nil {
			t.Fatalf("open: %v %v", open, err)
		}
		to, _ := nodestate.Parse(open.To)
		if err := n.j.Commit(open.ID, to); err != nil {
			t.Fatal(err)
		}
		expect(t, n.converged(Committed), "kube-controller-manager is not the render", "kube-scheduler is not the render")
	})
	t.Run("a resume that rolls back", func(t *testing.T) {
		n := crashedAt(t, fault.AfterApply)
		if _, err := n.engine(nil).Rollback(t.Context(), "wrongly"); !errors.Is(err, ErrRolledBack) {
			t.Fatalf("Rollback: %v", err)
		}
		expect(t, n.converged(Committed), "ended rolled-back", "is not the transaction's target state")
	})
	t.Run("a hidden staging file and a stray pod", func(t *testing.T) {
		n := crashedAt(t, fault.AfterApply)
		if _, err := n.engine(nil).Resume(t.Context()); err != nil {
			t.Fatal(err)
		}
		if p := n.converged(Committed); len(p) != 0 {
			t.Fatalf("not converged before the damage: %v", p)
		}
		b, _ := n.store.Read(nodestate.Scheduler)
		os.WriteFile(filepath.Join(n.store.Dir(), ".kube-scheduler.yaml123"), b, 0o600)
		// A copy kubelet admits beside the scheduler: no host ports
		// declared (a surge copy's shape, under a name that is no surge's).
		sb, err := manifest.SurgeBytes(nodestate.Scheduler, b)
		if err != nil {
			t.Fatal(err)
		}
		stray := strings.Replace(string(sb), "name: kube-scheduler-surge\n", "name: kube-scheduler-copy\n", 1)
		os.WriteFile(filepath.Join(n.store.Dir(), "stray.yaml"), []byte(stray), 0o600)
		expect(t, n.converged(Committed), "holds .kube-scheduler.yaml123", "holds stray.yaml", "kube-scheduler: stale processes", "runs 5 pods")
	})
}
