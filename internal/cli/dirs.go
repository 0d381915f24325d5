package cli

// The directories stratum-upgrade manages: opening (and, for init only,
// creating) the journal in the state directory, the manifest directory the
// journal records, and "must be run as root".

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"time"

	"golang.org/x/sys/unix"

	"github.com/ciq/stratum-upgrade/cluster"
	"github.com/ciq/stratum-upgrade/durable"
	"github.com/ciq/stratum-upgrade/fault"
	"github.com/ciq/stratum-upgrade/journal"
	"github.com/ciq/stratum-upgrade/manifest"
)

// errNoJournal: the state directory holds no journal; only init creates one.
var errNoJournal = errors.New("no journal")

// errManifestDirMoved: the command was given another manifest directory
// than the one the journal manages.
var errManifestDirMoved = errors.New("another manifest directory")

// noJournalError says which journal was looked for, and which other
// journals the defaults, the environment or the config file know of.
type noJournalError struct {
	path, stateDir string
	others         []knownJournal
	// snapshots is how many entries the state directory's snapshots/
	// holds: more than none says the node had a journal, and lost it.
	snapshots int
	snapDir   string
}

func (e *noJournalError) Error() string {
	if e.snapshots > 0 {
		return fmt.Sprintf("no journal at %s, but %s holds %d snapshot files of earlier transactions: this node's journal was lost or moved away", e.path, e.snapDir, e.snapshots)
	}
	return fmt.Sprintf("no journal at %s: this node was never initialised with --state-dir %s", e.path, e.stateDir)
}

// lost reports whether the state directory shows that it had a journal.
func (e *noJournalError) lost() bool { return e.snapshots > 0 }

func (e *noJournalError) Unwrap() error { return errNoJournal }

// knownJournal is a journal in a state directory other than the one in
// use, and where that directory was named.
type knownJournal struct {
	stateDir, source string
}

// otherJournals lists the state directories, other than the one in use,
// that the built-in default, the environment or the config file name and
// that hold a journal.
func (g *globals) otherJournals() []knownJournal {
	cands := []knownJournal{{DefaultStateDir, "the built-in default state directory"}}
	if v, ok := os.LookupEnv(envName("state-dir")); ok && v != "" {
		cands = append(cands, knownJournal{v, envName("state-dir")})
	}
	if g.cfg != nil {
		if v, ok := g.cfg.values["state-dir"]; ok {
			cands = append(cands, knownJournal{v, "state-dir in " + g.cfg.path})
		}
	}
	var out []knownJournal
	seen := map[string]bool{g.stateDir: true}
	for _, c := range cands {
		if seen[c.stateDir] {
			continue
		}
		seen[c.stateDir] = true
		if fi, err := os.Lstat(filepath.Join(c.stateDir, JournalFile)); err == nil && fi.Mode().IsRegular() {
			out = append(out, c)
		}
	}
	return out
}

func (g *globals) noJournal() error {
	ents, _ := os.ReadDir(g.snapshotRoot()) // none, unreadable: no evidence
	return &noJournalError{path: g.journalPath(), stateDir: g.stateDir, others: g.otherJournals(), snapshots: len(ents), snapDir: g.snapshotRoot()}
}

// journalExists reports whether the journal file is there (without
// creating anything).
func (g *globals) journalExists() (bool, error) {
	_, err := os.Lstat(g.journalPath())
	switch {
	case err == nil:
		return true, nil
	case errors.Is(err, os.ErrNotExist):
		return false, nil
	}
	return false, fmt.Errorf("state directory %s: %w", g.stateDir, err)
}

// openJournal opens the existing journal, read-only or for writing; a
// missing one is a *noJournalError and nothing is created. A read-write
// open refuses a manifest directory other than the one the journal
// records, and records it in a journal that records none; a read-only one
// warns.
func (g *globals) openJournal(readOnly bool) (*journal.Journal, error) {
	ok, err := g.journalExists()
	if err != nil {
		return nil, err
	}
	if !ok {
		return nil, g.noJournal()
	}
	j, err := g.open(readOnly)
	if err != nil {
		return nil, err
	}
	if err := g.checkManifestDir(j, readOnly, !readOnly); err != nil {
		j.Close()
		return nil, err
	}
	return j, nil
}

// createJournal is init's open: it creates the state directory and the
// journal when missing. It refuses a manifest directory other than the
// journal's unless move is set (init --force); init records it.
func (g *globals) createJournal(move bool) (*journal.Journal, error) {
	if err := g.lockManifestDir(); err != nil {
		return nil, err
	}
	if err := durable.MkdirAll(g.stateDir, 0o700); err != nil {
		if errors.Is(err, fs.ErrPermission) {
			return nil, fmt.Errorf("state directory %s: %w", g.stateDir, err)
		}
		return nil, fmt.Errorf("state directory %s: %w (choose another with --state-dir)", g.stateDir, err)
	}
	if ok, err := g.journalExists(); err == nil && !ok {
		if nj := g.noJournal().(*noJournalError); nj.lost() {
			// The runbook's re-import after a lost journal: allowed, said.
			fmt.Fprintf(g.stderr, "stratum-upgrade: warning: %s; init creates a new journal, which does not know those transactions (rollback --last cannot undo them, retention does not remove them)\n", nj)
		}
	}
	j, err := g.open(false)
	if err != nil {
		return nil, err
	}
	if !move {
		if err := g.checkManifestDir(j, false, false); err != nil {
			j.Close()
			return nil, err
		}
	}
	return j, nil
}

// checkCreatable checks, creating nothing, that dir is a directory or can
// be created as one: its nearest existing ancestor is a directory this
// process may write. what names dir in the error ("state directory").
func checkCreatable(what, dir string) error {
	for p := dir; ; p = filepath.Dir(p) {
		fi, err := os.Stat(p)
		switch {
		case (errors.Is(err, fs.ErrNotExist) || errors.Is(err, unix.ENOTDIR)) && p != filepath.Dir(p):
			continue
		case err != nil:
			return fmt.Errorf("%s %s: %w", what, dir, err)
		case !fi.IsDir():
			if p == dir {
				return fmt.Errorf("%s %s: it is a file, not a directory", what, dir)
			}
			return fmt.Errorf("%s %s: cannot create it: %s is a file, not a directory", what, dir, p)
		case p == dir:
			return nil
		}
		if err := unix.Access(p, unix.W_OK|unix.X_OK); err != nil {
			return fmt.Errorf("%s %s: cannot create it in %s: %w", what, dir, p, &fs.PathError{Op: "mkdir", Path: dir, Err: err})
		}
		return nil
	}
}

// open opens the journal file; a read-write open first takes the manifest
// directory's lock.
func (g *globals) open(readOnly bool) (*journal.Journal, error) {
	if !readOnly {
		if err := g.lockManifestDir(); err != nil {
			return nil, err
		}
	}
	j, err := journal.Open(g.journalPath(), journal.Options{ReadOnly: readOnly, LockTimeout: g.lockTimeout, BootID: fault.BootIDReader(journal.ReadBootID)})
	if err != nil {
		if errors.Is(err, journal.ErrLocked) {
			holder := ""
			if p, _ := readProgress(g.progressPath()); p != nil && !p.Finished && alive(p.PID) {
				holder = fmt.Sprintf("; %s says pid %d (stratum-upgrade %s, started %s) is driving a transaction", g.progressPath(), p.PID, p.Command, p.Started.Format(time.RFC3339))
			}
			return nil, fmt.Errorf("%w (waited %s; --lock-timeout waits longer)%s", err, g.lockTimeoutOrDefault(), holder)
		}
		return nil, err
	}
	return j, nil
}

// lockManifestDir takes the manifest directory's lock, once: the
// journal's lock keeps out a second stratum-upgrade on this state dir; the
// manifest dir's own lock keeps out one on another. Held until the process
// exits.
func (g *globals) lockManifestDir() error {
	if g.dirLocked {
		return nil
	}
	if _, err := manifest.LockDir(g.manifestDir, g.lockTimeoutOrDefault()); err != nil {
		return err
	}
	g.dirLocked = true
	return nil
}

func (g *globals) lockTimeoutOrDefault() time.Duration {
	if g.lockTimeout <= 0 {
		return journal.DefaultLockTimeout
	}
	return g.lockTimeout
}

// checkManifestDir compares --manifest-dir with the directory the journal
// records. Another one is refused on a read-write open (the command would
// write manifests there) and warned about on a read-only one. A journal that records none
// (written before it was recorded) is given this one when adopt is set and
// no transaction is open.
func (g *globals) checkManifestDir(j *journal.Journal, readOnly, adopt bool) error {
	rec, err := j.ManifestDir()
	if err != nil {
		return err
	}
	switch {
	case rec == "" && adopt:
		if err := j.PutManifestDir(g.manifestDir); err != nil && !errors.Is(err, journal.ErrTxnOpen) {
			return err
		}
	case rec == "" || rec == g.manifestDir:
	case readOnly:
		fmt.Fprintf(g.stderr, "stratum-upgrade: warning: %s manages the manifest directory %s, not %s: this shows %s\n", j.Path(), rec, g.manifestDir, g.manifestDir)
	default:
		return &manifestDirError{journal: j.Path(), recorded: rec, given: g.manifestDir}
	}
	return nil
}

// manifestDirError: --manifest-dir is not the directory the journal
// manages.
type manifestDirError struct {
	journal, recorded, given string
}

func (e *manifestDirError) Error() string {
	return fmt.Sprintf("journal %s manages the manifest directory %s; this command would write to %s (--manifest-dir), leaving two manifest sets", e.journal, e.recorded, e.given)
}

func (e *manifestDirError) Unwrap() error { return errManifestDirMoved }

// recordManifestDir records --manifest-dir as the directory the journal
// manages (init).
func (g *globals) recordManifestDir(j *journal.Journal) error {
	return j.PutManifestDir(g.manifestDir)
}

// geteuid is os.Geteuid; a test sets it.
var geteuid = os.Geteuid

// notRootError is a permission error of a process that is not root: the
// directories stratum-upgrade manages are root's on a node.
type notRootError struct {
	stateDir, manifestDir string
	err                   error
}

func (e *notRootError) Error() string {
	return fmt.Sprintf("must be run as root: the state directory %s and the manifest directory %s are root's (%v)", e.stateDir, e.manifestDir, rootCause(e.err))
}

func (e *notRootError) Unwrap() error { return e.err }

// rootCause is the innermost *fs.PathError of err, which names the path and
// the errno ("open /var/lib/stratum/stratum.db: permission denied"), or err.
func rootCause(err error) error {
	var pe *fs.PathError
	if errors.As(err, &pe) {
		return pe
	}
	return err
}

// asRoot turns a permission error of a process that is not root into a
// *notRootError; any other error is returned as it is.
func (g *globals) asRoot(err error) error {
	var nr *notRootError
	if err == nil || geteuid() == 0 || !errors.Is(err, fs.ErrPermission) || errors.As(err, &nr) {
		return err
	}
	var ue *usageError
	if errors.As(err, &ue) {
		return err // a file named on the command line: its message says which
	}
	return &notRootError{stateDir: g.stateDir, manifestDir: g.manifestDir, err: err}
}

// noJournalAdvice is what to do about a missing journal.
func (g *globals) noJournalAdvice(e *noJournalError) string {
	if e.lost() {
		return fmt.Sprintf(". Restore %s from a backup of the state directory; if it was moved aside on purpose (\"A damaged journal\" in docs/operations.md), `%s` imports the node state into a new one", JournalFile, g.cmdline("init --state FILE"))
	}
	init := fmt.Sprintf("`%s` imports the node state and creates it", g.cmdline("init --state FILE"))
	if len(e.others) == 0 {
		return "; " + init
	}
	var b strings.Builder
	for i, o := range e.others {
		if i == 0 {
			b.WriteString(". But ")
		} else {
			b.WriteString(" And ")
		}
		fmt.Fprintf(&b, "%s exists (%s): did you mean --state-dir %s?", filepath.Join(o.stateDir, JournalFile), o.source, shellQuote(o.stateDir))
	}
	b.WriteString(" If not, " + init)
	return b.String()
}

// createdDirs says what of the state directory init is about to create.
type createdDirs struct {
	journal, stateDir bool
	// kept is the files beside the journal that a coordinated init writes
	// before the rollout lock can refuse it (the etcd member count and
	// endpoints it read) and that do not exist yet.
	kept []string
}

// initKeeps is the files an init may write beside its journal before it
// is refused: what the engine keeps of the cluster it read.
var initKeeps = []string{cluster.MembersFile, cluster.EndpointsFile}

// created is what of the state directory does not exist yet: what init
// creates, and removes again when it is refused.
func (g *globals) created() createdDirs {
	_, jerr := os.Lstat(g.journalPath())
	_, derr := os.Lstat(g.stateDir)
	c := createdDirs{journal: errors.Is(jerr, fs.ErrNotExist), stateDir: errors.Is(derr, fs.ErrNotExist)}
	for _, name := range initKeeps {
		p := filepath.Join(filepath.Dir(g.journalPath()), name)
		if _, err := os.Lstat(p); errors.Is(err, fs.ErrNotExist) {
			c.kept = append(c.kept, p)
		}
	}
	return c
}

// remove removes the journal init created, closed, the files it kept of
// the cluster beside it, and the state directory if init created it and
// nothing else is in it. A failure is logged: the refusal stands either
// way.
func (c createdDirs) remove(g *globals) {
	if !c.journal {
		return
	}
	if err := os.Remove(g.journalPath()); err != nil {
		g.log.Warn("the refused init's new journal is not removed", "err", err)
		return
	}
	for _, p := range c.kept {
		if err := os.Remove(p); err != nil && !errors.Is(err, fs.ErrNotExist) {
			g.log.Warn("the refused init's record of the cluster is not removed", "file", p, "err", err)
		}
	}
	if c.stateDir {
		if err := os.Remove(g.stateDir); err != nil {
			g.log.Warn("the refused init's new state directory is not removed", "err", err)
		}
	}
}

// noTxnBegun reports whether j holds no transaction (and its history can
// be read): a refusal came before anything was begun.
func (g *globals) noTxnBegun(j *journal.Journal) bool {
	hist, err := j.History(1)
	return err == nil && len(hist) == 0
}
