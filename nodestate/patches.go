package nodestate

// Patches in kubeadm's format (cmd/kubeadm/app/util/patches): files named
// <target>[suffix][+strategic|merge|json].{yaml,json}, each a YAML or
// JSON stream of patches, applied to the target's pod in file order.
//
// The render is a pure function of the persisted state, so the patches
// are captured into it: a state file that names patches.directory gets
// the directory's files (names and contents) when Load reads it, and the
// journal keeps that copy. Rendering never reads the directory: an edit of
// a patch file changes nothing until the state is applied again, and a
// resume or rollback renders exactly the patches the transaction
// recorded. (Checking a hash at render time instead would make a changed
// directory break resume and rollback, the moments it must not.)

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"

	jsonpatch "gopkg.in/evanphx/json-patch.v4"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	"sigs.k8s.io/yaml"
)

// Patches are kubeadm patches of the rendered pods.
type Patches struct {
	// Directory is a kubeadm patches directory (kubeadm's --patches, or
	// patches.directory of its configuration). Load reads it into files,
	// as kubeadm reads it: every file below it in lexical order, the ones
	// whose name is not a patch of a component this node renders left out
	// (a kubeletconfiguration patch, a README), as kubeadm ignores them.
	Directory string `json:"directory,omitempty"`
	// Files are the patches, applied in this order, each to the pod its
	// name targets: the directory's files when directory is set (a file
	// given here that differs from the directory's is refused), else the
	// patches themselves (init --from-kubeadm writes one per component
	// whose pod has fields no other field carries).
	Files []PatchFile `json:"files,omitempty"`
}

// PatchFile is one patch file: its name in kubeadm's format and its
// contents.
type PatchFile struct {
	// Name is the file's path below the directory, its base name
	// <component>[suffix][+strategic|merge|json].{yaml,json}: the target
	// component, an optional suffix, and the patch type, strategic (the
	// default), merge (RFC 7386) or json (RFC 6902).
	Name string `json:"name"`
	// Content is the file's text: one patch, or several as YAML documents
	// separated by ---, applied in order.
	Content string `json:"content"`
}

// Patch types, as kubeadm names them after the '+'.
const (
	PatchStrategic = "strategic"
	PatchMerge     = "merge"
	PatchJSON      = "json"
)

// kubeadmOnlyTargets are kubeadm patch targets that are no static pod;
// a patches directory shared with kubeadm may hold them.
var kubeadmOnlyTargets = []string{"kubeletconfiguration", "corednsdeployment", "kubeproxydaemonset"}

var (
	patchExtension = regexp.MustCompile(`.+\.(json|yaml)$`)
	patchName      = regexp.MustCompile(`^(` + strings.Join(append(slices.Clone(Components), kubeadmOnlyTargets...), "|") +
		`)([^.+\n]*)?(\+)?(json|merge|strategic)?`)
)

// errNotPatch is a file kubeadm would ignore (its extension or target is
// not one of a patch).
var errNotPatch = errors.New("not a patch file")

// ParsePatchName is kubeadm's parseFilename on the base name of name: the
// target and the patch type. A name kubeadm would ignore (another
// extension, an unknown target) wraps errNotPatch; a '+' without a known
// type after it is an error, as in kubeadm.
func ParsePatchName(name string) (target, patchType string, err error) {
	base := filepath.Base(name)
	if !patchExtension.MatchString(base) {
		return "", "", fmt.Errorf("%w: the extension must be .yaml or .json", errNotPatch)
	}
	sub := patchName.FindStringSubmatch(base)
	if sub == nil {
		return "", "", fmt.Errorf("%w: the name must start with a target (%s)", errNotPatch, strings.Join(Components, ", "))
	}
	if sub[3] != "" && sub[4] == "" {
		return "", "", errors.New("unknown or missing patch type after '+': must be strategic, merge or json")
	}
	return sub[1], cmpOr(sub[4], PatchStrategic), nil
}

func cmpOr(a, b string) string {
	if a != "" {
		return a
	}
	return b
}

// Patches splits f's content into its patches, each as JSON, as kubeadm's
// CreatePatchSet does; a json patch must decode as an RFC 6902 patch, and
// a strategic or merge patch must be an object.
func (f PatchFile) Patches() ([][]byte, error) {
	_, typ, err := ParsePatchName(f.Name)
	if err != nil {
		return nil, err
	}
	var out [][]byte
	r := utilyaml.NewYAMLReader(bufio.NewReader(strings.NewReader(f.Content)))
	for {
		doc, err := r.Read()
		if err == io.EOF {
			break
		}
		if err != nil {
			return nil, fmt.Errorf("split the patches: %w", err)
		}
		if doc = bytes.TrimSpace(doc); len(doc) == 0 {
			continue
		}
		j, err := yaml.YAMLToJSON(doc)
		if err != nil {
			return nil, fmt.Errorf("patch %d is not YAML or JSON: %w", len(out)+1, err)
		}
		if typ == PatchJSON {
			if _, err := jsonpatch.DecodePatch(j); err != nil {
				return nil, fmt.Errorf("patch %d is not a JSON patch (a list of operations): %w", len(out)+1, err)
			}
		} else if !bytes.HasPrefix(bytes.TrimSpace(j), []byte("{")) {
			return nil, fmt.Errorf("patch %d: a %s patch must be an object", len(out)+1, typ)
		}
		out = append(out, j)
	}
	if len(out) == 0 {
		return nil, errors.New("no patch in it")
	}
	return out, nil
}

func (st *NodeState) validatePatches(roster []string, bad func(field, format string, a ...any)) {
	if st.Patches == nil {
		return
	}
	if d := st.Patches.Directory; d != "" && (!filepath.IsAbs(d) || filepath.Clean(d) != d) {
		bad("patches.directory", "must be a clean absolute path, got %q", d)
	}
	for i, f := range st.Patches.Files {
		field := fmt.Sprintf("patches.files[%d]", i)
		target, _, err := ParsePatchName(f.Name)
		switch {
		case f.Name == "" || filepath.IsAbs(f.Name) || filepath.Clean(f.Name) != f.Name || strings.HasPrefix(f.Name, "../"):
			bad(field+".name", "must be a clean relative path, got %q", f.Name)
			continue
		case err != nil:
			bad(field+".name", "%q: %v", f.Name, err)
			continue
		case !slices.Contains(roster, target):
			bad(field+".name", "%q targets %s, which this node does not render (its roster: %s)", f.Name, target, strings.Join(roster, ", "))
			continue
		case slices.ContainsFunc(st.Patches.Files[:i], func(o PatchFile) bool { return o.Name == f.Name }):
			bad(field+".name", "%s is listed twice", f.Name)
		}
		if _, err := f.Patches(); err != nil {
			bad(field+".content", "%s: %v", f.Name, err)
		}
	}
}

// ReadPatchDir reads a kubeadm patches directory as kubeadm does: every
// regular file below dir in filepath.Walk's order (lexical, a
// subdirectory's files at its place), leaving out the files kubeadm
// ignores (not .yaml or .json, no known target, empty) and the patches of
// targets that are no static pod (kubeletconfiguration, ...). A name with
// a '+' and no known type is an error, as in kubeadm.
func ReadPatchDir(dir string) ([]PatchFile, error) {
	var out []PatchFile
	err := filepath.WalkDir(dir, func(path string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		target, _, err := ParsePatchName(d.Name())
		if errors.Is(err, errNotPatch) || err == nil && slices.Contains(kubeadmOnlyTargets, target) {
			return nil
		}
		if err != nil {
			return fmt.Errorf("%s: %w", path, err)
		}
		b, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		if len(b) == 0 {
			return nil
		}
		rel, err := filepath.Rel(dir, path)
		if err != nil {
			return err
		}
		out = append(out, PatchFile{Name: rel, Content: string(b)})
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("read the patches directory %s: %w", dir, err)
	}
	return out, nil
}

// capturePatches fills patches.files from patches.directory (Load). A
// state that lists files too must list exactly the directory's: such a
// file is the journal's copy (`stratum-upgrade state`), and a directory
// changed since would otherwise be taken silently or ignored.
func (st *NodeState) capturePatches() error {
	if st.Patches == nil || st.Patches.Directory == "" {
		return nil
	}
	files, err := ReadPatchDir(st.Patches.Directory)
	if err != nil {
		return fmt.Errorf("patches.directory: %w", err)
	}
	if len(st.Patches.Files) > 0 && !slices.Equal(files, st.Patches.Files) {
		return fmt.Errorf("patches.files: differ from the files of patches.directory %s (%s): remove patches.files to take the directory's, or unset patches.directory to keep these",
			st.Patches.Directory, patchDiff(st.Patches.Files, files))
	}
	st.Patches.Files = files
	if err := st.Validate(); err != nil {
		return fmt.Errorf("patches.directory %s: %w", st.Patches.Directory, err)
	}
	return nil
}

// patchDiff names the first file that differs between listed and read.
func patchDiff(listed, read []PatchFile) string {
	for i := range max(len(listed), len(read)) {
		switch {
		case i >= len(listed):
			return read[i].Name + " is in the directory only"
		case i >= len(read):
			return listed[i].Name + " is not in the directory"
		case listed[i].Name != read[i].Name:
			return fmt.Sprintf("%s listed where the directory has %s", listed[i].Name, read[i].Name)
		case listed[i].Content != read[i].Content:
			return listed[i].Name + " changed"
		}
	}
	return "none"
}
