package lazyfs

import (
	"bufio"
	"errors"
	"os"
	"strings"
	"syscall"
	"testing"
)

// MountT mounts a lazyfs over two fresh t.TempDir directories (backing and
// mountpoint) with default Options, and unmounts it in t.Cleanup, detaching
// it lazily if the test left files open. It skips the test if not running as
// root or if /dev/fuse is absent, and fails it if the mount fails.
func MountT(t testing.TB) *FS {
	t.Helper()
	return MountOptsT(t, Options{})
}

// MountOptsT is MountT with options. The stash goes in a third temp dir.
func MountOptsT(t testing.TB, opts Options) *FS {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("needs root (lazyfs mounts FUSE without fusermount): make test or make crash as root")
	}
	if _, err := os.Stat("/dev/fuse"); err != nil {
		t.Skipf("needs /dev/fuse (lazyfs): make test or make crash as root where FUSE is available: %v", err)
	}
	backing, mnt := t.TempDir(), t.TempDir()
	if opts.StashDir == "" {
		opts.StashDir = t.TempDir() + "/stash"
	}
	f, err := Mount(backing, mnt, opts)
	if err != nil {
		t.Fatalf("lazyfs: %v", err)
	}
	t.Cleanup(func() {
		if err := f.Close(); err != nil {
			t.Errorf("lazyfs: cleanup: %v", err)
		}
	})
	return f
}

// CleanStaleMounts lazily detaches lazyfs mounts whose server is gone (their
// mountpoint answers ENOTCONN), as left by a test binary that was killed.
// Live mounts are left alone. It returns the mountpoints it detached.
func CleanStaleMounts() []string {
	fh, err := os.Open("/proc/self/mounts")
	if err != nil {
		return nil
	}
	defer fh.Close()
	var done []string
	sc := bufio.NewScanner(fh)
	for sc.Scan() {
		fields := strings.Fields(sc.Text())
		if len(fields) < 3 || fields[2] != "fuse.lazyfs" {
			continue
		}
		mp := unescapeMount(fields[1])
		var st syscall.Stat_t
		if err := syscall.Stat(mp, &st); !errors.Is(err, syscall.ENOTCONN) {
			continue
		}
		if syscall.Unmount(mp, syscall.MNT_DETACH) == nil {
			done = append(done, mp)
		}
	}
	return done
}

func splitLines(s string) []string { return strings.Split(strings.TrimSpace(s), "\n") }

// unescapeMount undoes the octal escapes of /proc/mounts (\040 for space...).
func unescapeMount(s string) string {
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] == '\\' && i+3 < len(s) {
			n := 0
			ok := true
			for _, c := range s[i+1 : i+4] {
				if c < '0' || c > '7' {
					ok = false
					break
				}
				n = n*8 + int(c-'0')
			}
			if ok {
				b.WriteByte(byte(n))
				i += 3
				continue
			}
		}
		b.WriteByte(s[i])
	}
	return b.String()
}
