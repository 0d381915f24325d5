package proc

import (
	"os"
	"strings"
	"testing"
)

func TestMemory(t *testing.T) {
	root := fakeRoot(t, map[string]string{
		"meminfo":    "MemTotal:        8000000 kB\nMemFree:          100000 kB\nMemAvailable:    2500000 kB\n",
		"500/stat":   statLine(500, "a", 'S', 1, 10),
		"500/status": "Name:\ta\nVmRSS:\t  1000 kB\nThreads:\t3\n",
		"501/stat":   statLine(501, "b", 'S', 1, 11),
		"501/status": "Name:\tb\nVmRSS:\t  24 kB\n",
		"502/stat":   statLine(502, "z", 'Z', 1, 12),
		"502/status": "Name:\tz\nState:\tZ (zombie)\n",
	})
	s, err := NewScanner(root)
	if err != nil {
		t.Fatal(err)
	}
	if v, err := s.MemAvailable(); err != nil || v != 2500000*1024 {
		t.Fatalf("MemAvailable = %d, %v; want %d", v, err, 2500000*1024)
	}
	// 502 a zombie, 503 vanished, 501 with another start time: all 0.
	ps := []Process{{500, 10}, {501, 99}, {502, 12}, {503, 13}}
	if v, err := s.RSS(ps); err != nil || v != 1000*1024 {
		t.Fatalf("RSS = %d, %v; want %d", v, err, 1000*1024)
	}
	if err := os.WriteFile(root+"/501/status", []byte("VmRSS: lots\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := s.RSS([]Process{{501, 11}}); err == nil {
		t.Fatal("RSS of an unparsable status: no error")
	}
	if err := os.WriteFile(root+"/meminfo", []byte("MemTotal: 1 kB\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := s.MemAvailable(); err == nil || !strings.Contains(err.Error(), "no MemAvailable") {
		t.Fatalf("MemAvailable without the line = %v", err)
	}
	if v, err := Host().MemAvailable(); err != nil || v == 0 {
		t.Fatalf("host MemAvailable = %d, %v", v, err)
	}
}
