package proc

// Whose process is it: the pod cgroups kubelet puts a static pod's
// processes in tell the node's control-plane components from a process of
// the same name that something else runs (a CNI's etcd, a test's, a
// developer's).

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
)

// Identity is the processes of a component's binary split by whose they
// are. Ours are the component's: they count for every wait, stop and
// status. Foreign ones run the same binary elsewhere and count for none of
// them; status lists them as foreign.
type Identity struct {
	Ours    []Process
	Foreign []Process
	// ByCgroup is true when kubelet's pod cgroups decided (they are in use
	// on this node), false when only the binary name did.
	ByCgroup bool
}

// Placement is where a process runs as far as kubelet is concerned,
// judged from one read of /proc/<pid>/cgroup.
type Placement int

const (
	// Unknown: the cgroup file could not be read; the process counts by
	// its name alone, as if pod cgroups were not in use.
	Unknown Placement = iota
	// Outside: no pod cgroup in any hierarchy.
	Outside
	// StaticPod: in the pod cgroup of a static pod, whose UID kubelet's
	// file source computes as a hash: 32 hex digits.
	StaticPod
	// APIPod: in the pod cgroup of a pod from the API server (a DaemonSet's,
	// a CNI's): its UID is a UUID, never a static pod's.
	APIPod
)

func (p Placement) String() string {
	switch p {
	case Outside:
		return "outside every pod cgroup"
	case StaticPod:
		return "in a static pod's cgroup"
	case APIPod:
		return "in an API pod's cgroup"
	}
	return "unknown (cgroup file unreadable)"
}

// Identify splits the processes of t.Binary (PIDs) into t's and foreign
// ones. The rule (docs/architecture.md, "Process identity"):
//
//   - when kubelet's pod cgroups are in use -- a process of t.Binary is in
//     a pod cgroup, or (for a scanner not scoped by Within) a kubepods
//     cgroup exists at the root of a hierarchy, or (for a scoped one) a
//     process of its tree was once seen in a pod cgroup -- t's processes are those in a static pod's
//     cgroup; one outside every pod cgroup, or in an API pod's, is foreign;
//   - otherwise (kubelet runs with cgroupsPerQOS off, or a stand-in runs
//     processes outside cgroups) every process of t.Binary is t's, as the
//     name alone said before;
//   - a process whose cgroup file cannot be read is unknown and counts as
//     t's either way: never taken for foreign, so a wait for it to exit
//     cannot end early.
//
// A scoped scanner sees one process tree (a kubelet stand-in's), so only
// that tree's processes say whether its pods have cgroups: the host's
// kubepods belongs to another kubelet. What they said is kept, so that
// while the component is down (between a stop and a start) a foreign
// process alone in view is still foreign.
//
// The binary name is the cross check: a process in a static pod's cgroup
// that runs another binary is not t's.
//
// A process in the pod cgroup of a UID in t.NotPods (a surge's other
// instance) is left out of both lists: it is neither t's nor foreign for
// this look. Only a readable pod cgroup can exclude a process, so one whose
// cgroup file is unreadable stays t's.
func (s *Scanner) Identify(t Target) (Identity, error) {
	id, _, err := s.identify(t)
	return id, err
}

// identify is Identify that also returns, for each of id.Ours, the UID of
// its static pod ("" for a process whose cgroup is unreadable, or for all
// when pod cgroups are not in use).
func (s *Scanner) identify(t Target) (Identity, []string, error) {
	ps, err := s.PIDs(t.Binary)
	if err != nil {
		return Identity{}, nil, err
	}
	id, pods := s.split(ps, t.NotPods)
	return id, pods, nil
}

// Of is Identify's Ours: the processes that are t's.
func (s *Scanner) Of(t Target) ([]Process, error) {
	id, err := s.Identify(t)
	return id.Ours, err
}

// split applies Identify's rule to ps, processes of one binary, leaving
// out the ones in the pod cgroup of a UID in notPods. pods[i] is the pod
// UID of id.Ours[i] (see identify).
func (s *Scanner) split(ps []Process, notPods []string) (id Identity, pods []string) {
	places := make([]Placement, len(ps))
	uids := make([]string, len(ps))
	inPods := false
	for i, p := range ps {
		places[i], uids[i] = s.place(p.PID)
		inPods = inPods || places[i] == StaticPod || places[i] == APIPod
	}
	id.ByCgroup = inPods
	switch {
	case s.podsSeen != nil:
		if inPods {
			s.podsSeen.Store(true)
		}
		id.ByCgroup = id.ByCgroup || s.podsSeen.Load()
	default:
		id.ByCgroup = id.ByCgroup || s.kubepodsExists()
	}
	for i, p := range ps {
		switch {
		case uids[i] != "" && slices.ContainsFunc(notPods, func(u string) bool { return normalUID(u) == uids[i] }):
			// The other instance of a surge: neither t's nor foreign.
		case !id.ByCgroup:
			id.Ours = append(id.Ours, p)
			pods = append(pods, "")
		case places[i] == StaticPod, places[i] == Unknown:
			id.Ours = append(id.Ours, p)
			pods = append(pods, uids[i])
		default:
			id.Foreign = append(id.Foreign, p)
		}
	}
	return id, pods
}

// normalUID is a pod UID as this package compares it: the systemd
// driver's underscores as the UID's dashes, lower case.
func normalUID(uid string) string {
	return strings.ToLower(strings.ReplaceAll(uid, "_", "-"))
}

// Place reads where pid runs from its /proc/<pid>/cgroup: in a static
// pod's cgroup, an API pod's, outside every pod cgroup, or Unknown when
// the file cannot be read (a vanished process included: the next scan
// drops it).
func (s *Scanner) Place(pid int) Placement {
	pl, _ := s.place(pid)
	return pl
}

// place is Place with the pod's UID (normalUID), "" outside pod cgroups
// and when unknown. A process whose lines name several pods (never seen
// from kubelet) is placed by the first.
func (s *Scanner) place(pid int) (Placement, string) {
	b, err := os.ReadFile(s.pidFile(pid, "cgroup"))
	if err != nil {
		return Unknown, ""
	}
	lines := podPaths(b)
	if len(lines) == 0 {
		return Outside, ""
	}
	uid := normalUID(podUID(lines[0].path))
	for _, l := range lines {
		if !isStaticUID(podUID(l.path)) {
			return APIPod, uid
		}
	}
	return StaticPod, uid
}

// podUID is the pod UID in the last element of a path podPaths cut after
// its pod component, as kubelet wrote it (underscores for dashes under the
// systemd driver).
func podUID(path string) string {
	el := path[strings.LastIndexByte(path, '/')+1:]
	if uid, ok := strings.CutPrefix(el, "pod"); ok {
		return uid
	}
	name := strings.TrimSuffix(el, ".slice")
	return name[strings.LastIndex(name, "-pod")+len("-pod"):]
}

// isStaticUID reports whether uid is one kubelet's file source computes
// for a static pod: the hex of a 16-byte hash (md5 up to v1.34, FNV-128a
// from v1.35; pkg/kubelet/config/common.go), where an API pod's is a
// dashed UUID.
func isStaticUID(uid string) bool {
	if len(uid) != 32 {
		return false
	}
	for _, r := range uid {
		if !(r >= '0' && r <= '9' || r >= 'a' && r <= 'f') {
			return false
		}
	}
	return true
}

// kubepodsExists reports whether kubelet's top-level pod cgroup
// (kubepods with the cgroupfs driver, kubepods.slice with systemd) exists
// at the root of the unified hierarchy or of any v1 hierarchy: kubelet
// creates it at start when it makes pod cgroups, and it stays.
func (s *Scanner) kubepodsExists() bool {
	root := s.cgroupDir()
	dirs := []string{root, filepath.Join(root, "unified")}
	if ents, err := os.ReadDir(root); err == nil {
		for _, e := range ents {
			if e.IsDir() && e.Name() != "unified" {
				dirs = append(dirs, filepath.Join(root, e.Name()))
			}
		}
	}
	for _, d := range dirs {
		for _, n := range []string{"kubepods", "kubepods.slice"} {
			if fi, err := os.Stat(filepath.Join(d, n)); err == nil && fi.IsDir() {
				return true
			}
		}
	}
	return false
}
