package journal

import (
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/ciq/stratum-upgrade/proc"
)

// rawFsync is the time of one 4 KiB write plus fsync of a file in dir,
// averaged over n rounds: the floor any durable record costs.
func rawFsync(b *testing.B, dir string, n int) time.Duration {
	b.Helper()
	f, err := os.OpenFile(filepath.Join(dir, "raw"), os.O_RDWR|os.O_CREATE|os.O_TRUNC, 0o600)
	must(b, err)
	defer f.Close()
	buf := make([]byte, 4096)
	start := time.Now()
	for i := range n {
		buf[0] = byte(i)
		if _, err := f.WriteAt(buf, 0); err != nil {
			b.Fatal(err)
		}
		must(b, f.Sync())
	}
	return time.Since(start) / time.Duration(n)
}

// benchAppend measures Append of recs per op and reports it against a raw
// 4 KiB write+fsync in the same directory, and the bbolt commits per op.
func benchAppend(b *testing.B, recs ...Record) {
	dir := b.TempDir()
	j, err := Open(filepath.Join(dir, "stratum.db"), Options{BootID: func() (string, error) { return "bench-boot", nil }})
	must(b, err)
	defer j.Close()
	txn, err := j.Begin(Txn{Kind: KindUpgrade})
	must(b, err)
	c0 := j.Commits()
	b.ResetTimer()
	for b.Loop() {
		if _, err := j.Append(txn.ID, PhaseApplying, recs...); err != nil {
			b.Fatal(err)
		}
	}
	b.StopTimer()
	n := b.N
	perOp := b.Elapsed() / time.Duration(n)
	raw := rawFsync(b, dir, min(max(n, 20), 500))
	b.ReportMetric(float64(j.Commits()-c0)/float64(n), "commits/op")
	b.ReportMetric(float64(raw.Nanoseconds()), "raw-write+fsync-ns")
	b.ReportMetric(float64(perOp)/float64(raw), "x-raw-fsync")
}

// BenchmarkAppend is one journaled record: the mark before a manifest write.
func BenchmarkAppend(b *testing.B) {
	benchAppend(b, Record{Step: StepMark, Component: "kube-apiserver", ProcMark: &proc.Mark{Ticks: 123456, BootID: "bench-boot"}, Stamp: "2026-12-02T13:04:05Z"})
}

// BenchmarkAppendStep is an engine step boundary: "step i done" and "step
// i+1 started" in one Append, which must stay one commit.
func BenchmarkAppendStep(b *testing.B) {
	benchAppend(b,
		Record{Step: StepDone, Component: "kube-apiserver"},
		Record{Step: StepMark, Component: "kube-controller-manager", ProcMark: &proc.Mark{Ticks: 123456, BootID: "bench-boot"}, Stamp: "2026-12-02T13:04:05Z"})
}
