package adopt

import (
	"path/filepath"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/util/version"

	"github.com/ciq/stratum-upgrade/engine"
	"github.com/ciq/stratum-upgrade/manifest"
	"github.com/ciq/stratum-upgrade/nodestate"
	"github.com/ciq/stratum-upgrade/versions/kubeadm"
)

// Every fixture's adopted state upgrades by version to the next minor
// (the release `plan --to` makes): each component renders at the new
// version with its extra volumes, environment, resources and adopted
// patches still applied, and every manifest changes.
func TestAdoptedFixturesUpgradeToNextMinor(t *testing.T) {
	checked := 0
	for _, dir := range fixtures(t) {
		ver := filepath.Base(filepath.Dir(dir))
		next, ok := kubeadm.Next(version.MustParseSemantic(ver))
		if !ok {
			continue
		}
		t.Run(ver+"/"+filepath.Base(dir), func(t *testing.T) {
			st := check(t, dir).State
			rel, err := engine.ReleaseForVersion(st, next.Newest())
			if err != nil {
				t.Fatal(err)
			}
			up, err := rel.Apply(st)
			if err != nil {
				t.Fatal(err)
			}
			prof, err := manifest.LoadProfile(up)
			if err != nil {
				t.Fatal(err)
			}
			for _, c := range manifest.NamesFor(up) {
				before, err := manifest.RenderBytes(st, prof, c, "")
				if err != nil {
					t.Fatal(err)
				}
				pod, err := manifest.Render(up, prof, c, "")
				if err != nil {
					t.Fatalf("%s at %s: %v", c, next.Newest(), err)
				}
				after, _ := manifest.Encode(pod)
				if string(before) == string(after) {
					t.Errorf("%s: the upgrade to %s does not change its manifest", c, next.Newest())
				}
				if c != nodestate.Etcd && !strings.HasSuffix(pod.Spec.Containers[0].Image, ":"+next.Newest()) {
					t.Errorf("%s runs %s after the upgrade to %s", c, pod.Spec.Containers[0].Image, next.Newest())
				}
				for _, v := range up.ExtraVolumes[c] {
					if _, _, ok := mountOfPod(pod, v.Name); !ok {
						t.Errorf("%s lost its extra volume %s", c, v.Name)
					}
				}
				if len(pod.Spec.Containers[0].Env) < len(up.ExtraEnvs[c]) {
					t.Errorf("%s lost extra envs: %v", c, pod.Spec.Containers[0].Env)
				}
			}
		})
		checked++
	}
	if checked == 0 {
		t.Fatal("no fixture of a minor with a next one")
	}
}

func mountOfPod(pod *corev1.Pod, name string) (corev1.Volume, corev1.VolumeMount, bool) {
	var vol corev1.Volume
	var mount corev1.VolumeMount
	okV, okM := false, false
	for _, v := range pod.Spec.Volumes {
		if v.Name == name {
			vol, okV = v, true
		}
	}
	for _, m := range pod.Spec.Containers[0].VolumeMounts {
		if m.Name == name {
			mount, okM = m, true
		}
	}
	return vol, mount, okV && okM
}
