package journal

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"hash/fnv"
	"io"
	"os"
)

// The bbolt file format (go.etcd.io/bbolt v1.4, internal/common), as far as
// verifyFile reads it. Integers are in the machine's byte order.
//
//	page header (16 bytes): id u64, flags u16, count u16, overflow u32
//	meta (after the header of pages 0 and 1): magic u32, version u32,
//	    pageSize u32, flags u32, root bucket (root u64, sequence u64),
//	    freelist u64, pgid u64 (high water mark), txid u64, checksum u64
//	    (FNV-1a 64 of the 56 bytes before it)
//	branch element (16 bytes): pos u32, ksize u32, pgid u64
//	leaf element (16 bytes): flags u32, pos u32, ksize u32, vsize u32
//	    (pos counts from the element's own offset)
//	freelist page: count page ids (u64); a count of 0xFFFF means the real
//	    count is the first u64 and the ids follow it
//	bucket value: root u64, sequence u64; root 0 means an inline bucket,
//	    whose leaf page follows in the value
const (
	boltMagic        = 0xED0CDAED
	boltVersion      = 2
	pageHeaderSize   = 16
	elementSize      = 16
	metaSumSize      = 56
	flagBranch       = 0x01
	flagLeaf         = 0x02
	flagMeta         = 0x04
	flagFreelist     = 0x10
	leafBucketFlag   = 0x01
	bucketHeaderSize = 16
	maxKeySize       = 32768
	minPageSize      = 1024
	maxPageSize      = 1 << 24
	noFreelist       = ^uint64(0)
)

var ne = binary.NativeEndian

// boltMeta is a decoded meta page.
type boltMeta struct {
	magic, version, pageSize uint32
	root, freelist, pgid     uint64
	txid                     uint64
	err                      error // why it is not valid; nil when it is
}

func decodeMeta(b []byte) boltMeta {
	if len(b) < pageHeaderSize+metaSumSize+8 {
		return boltMeta{err: errors.New("short meta page")}
	}
	m := b[pageHeaderSize:]
	out := boltMeta{
		magic: ne.Uint32(m[0:]), version: ne.Uint32(m[4:]), pageSize: ne.Uint32(m[8:]),
		root: ne.Uint64(m[16:]), freelist: ne.Uint64(m[32:]), pgid: ne.Uint64(m[40:]), txid: ne.Uint64(m[48:]),
	}
	h := fnv.New64a()
	h.Write(m[:metaSumSize])
	switch {
	case out.magic != boltMagic:
		out.err = errors.New("bad magic")
	case out.version != boltVersion:
		out.err = fmt.Errorf("bbolt format version %d, not %d", out.version, boltVersion)
	case h.Sum64() != ne.Uint64(m[metaSumSize:]):
		out.err = errors.New("meta checksum mismatch")
	}
	return out
}

// notBoltError is a file with no valid bbolt meta page.
type notBoltError struct{ detail string }

func (e *notBoltError) Error() string { return "not a bbolt database (" + e.detail + ")" }

// verifyFile checks that f, a bbolt file, is safe for bbolt to open and
// read: bbolt trusts its file and, on damage, panics, reads outside the
// file (a fatal SIGBUS) or loops. It reads f with ReadAt only, never
// writes, and checks what bbolt relies on: a valid meta page (the one
// bbolt would pick: the valid one with the higher transaction id), a file
// as long as the meta's high water mark, a well-formed freelist, and a
// bucket tree whose every page is in range, has the type and id it should,
// holds elements within its bounds in key order, and is reachable once and
// not also free. Unreachable pages that are not free (leaked space) are
// not an error. An empty file passes here (Open refuses one it did not
// create).
//
// The error says what is damaged; a file with no valid meta page gives a
// *notBoltError.
func verifyFile(f *os.File) error {
	fi, err := f.Stat()
	if err != nil {
		return err
	}
	size := fi.Size()
	if size == 0 {
		return nil
	}
	// bbolt reads the page size from meta 0, else from meta 1 at any of
	// its candidate offsets.
	var pageSize int
	first := make([]byte, 4096)
	n, _ := f.ReadAt(first, 0)
	m0 := decodeMeta(first[:n])
	if m0.err == nil {
		pageSize = int(m0.pageSize)
	} else {
		for i := 0; i <= 14 && pageSize == 0; i++ {
			pos := int64(1024) << i
			if pos >= size-1024 {
				break
			}
			n, _ := f.ReadAt(first, pos)
			if m := decodeMeta(first[:n]); m.err == nil {
				pageSize = int(m.pageSize)
			}
		}
	}
	if pageSize == 0 {
		return &notBoltError{m0.err.Error()}
	}
	if pageSize < minPageSize || pageSize > maxPageSize || pageSize&(pageSize-1) != 0 {
		return fmt.Errorf("page size %d is not a power of two between %d and %d", pageSize, minPageSize, maxPageSize)
	}
	if size < 2*int64(pageSize) {
		return fmt.Errorf("the file is %d bytes, shorter than its two meta pages of %d bytes", size, pageSize)
	}
	v := &verifier{f: f, size: size, pageSize: pageSize}
	var metas [2]boltMeta
	for i := range metas {
		b, err := v.read(uint64(i), 1)
		if err != nil {
			return err
		}
		metas[i] = decodeMeta(b)
	}
	a, b := metas[0], metas[1]
	if b.txid > a.txid {
		a, b = b, a
	}
	m := a
	if a.err != nil {
		m = b
	}
	if m.err != nil {
		return &notBoltError{fmt.Sprintf("meta page 0: %v; meta page 1: %v", metas[0].err, metas[1].err)}
	}
	if m.pageSize != uint32(pageSize) {
		return fmt.Errorf("meta says page size %d, the file was read with %d", m.pageSize, pageSize)
	}
	return v.check(m)
}

type verifier struct {
	f        io.ReaderAt
	size     int64
	pageSize int
	hwm      uint64 // the meta's pgid: pages [0, hwm) are in use or free
	used     []bool // reached from the meta
	free     map[uint64]bool
}

// read reads pages [id, id+n) after checking they are inside the file.
func (v *verifier) read(id uint64, n uint64) ([]byte, error) {
	ps := uint64(v.pageSize)
	if id >= uint64(v.size)/ps || n > uint64(v.size)/ps-id {
		return nil, fmt.Errorf("page %d (+%d overflow) lies beyond the end of the file (%d bytes)", id, n-1, v.size)
	}
	b := make([]byte, n*ps)
	if _, err := v.f.ReadAt(b, int64(id*ps)); err != nil {
		return nil, fmt.Errorf("read page %d: %w", id, err)
	}
	return b, nil
}

// page reads page id, which must be below the high water mark and not yet
// reached, with its overflow, marks it reached and checks its header.
func (v *verifier) page(id uint64, want uint16) ([]byte, error) {
	if id < 2 || id >= v.hwm {
		return nil, fmt.Errorf("page id %d is outside [2, %d)", id, v.hwm)
	}
	hdr, err := v.read(id, 1)
	if err != nil {
		return nil, err
	}
	if got := ne.Uint64(hdr); got != id {
		return nil, fmt.Errorf("page %d says it is page %d", id, got)
	}
	flags := ne.Uint16(hdr[8:])
	if flags&want == 0 {
		return nil, fmt.Errorf("page %d has flags %#x, want %#x", id, flags, want)
	}
	overflow := uint64(ne.Uint32(hdr[12:]))
	if overflow >= v.hwm-id {
		return nil, fmt.Errorf("page %d overflows by %d pages past the high water mark %d", id, overflow, v.hwm)
	}
	for i := id; i <= id+overflow; i++ {
		if v.used[i] {
			return nil, fmt.Errorf("page %d is referenced twice", i)
		}
		v.used[i] = true
	}
	if overflow == 0 {
		return hdr, nil
	}
	return v.read(id, overflow+1)
}

func (v *verifier) check(m boltMeta) error {
	ps := uint64(v.pageSize)
	if m.pgid < 4 || m.pgid > uint64(v.size)/ps {
		return fmt.Errorf("high water mark %d pages (of %d bytes) does not fit the file of %d bytes: it is truncated", m.pgid, ps, v.size)
	}
	v.hwm = m.pgid
	v.used = make([]bool, m.pgid)
	v.used[0], v.used[1] = true, true
	if m.freelist == noFreelist {
		return errors.New("it has no freelist page (written with NoFreelistSync, which stratum-upgrade never uses)")
	}
	fl, err := v.page(m.freelist, flagFreelist)
	if err != nil {
		return fmt.Errorf("freelist: %w", err)
	}
	if err := v.readFreelist(fl); err != nil {
		return fmt.Errorf("freelist page %d: %w", m.freelist, err)
	}
	if err := v.bucket(m.root, nil, 0); err != nil {
		return err
	}
	for id := range v.free {
		if v.used[id] {
			return fmt.Errorf("page %d is both free and in use", id)
		}
	}
	return nil
}

func (v *verifier) readFreelist(p []byte) error {
	count := uint64(ne.Uint16(p[10:]))
	ids := p[pageHeaderSize:]
	if count == 0xFFFF {
		if len(ids) < 8 {
			return errors.New("no room for the count")
		}
		count, ids = ne.Uint64(ids), ids[8:]
	}
	if count > uint64(len(ids))/8 {
		return fmt.Errorf("%d ids do not fit the page", count)
	}
	v.free = make(map[uint64]bool, count)
	for i := range count {
		id := ne.Uint64(ids[i*8:])
		switch {
		case id < 2 || id >= v.hwm:
			return fmt.Errorf("free page id %d is outside [2, %d)", id, v.hwm)
		case v.free[id]:
			return fmt.Errorf("page %d is free twice", id)
		}
		v.free[id] = true
	}
	return nil
}

// bucket checks the bucket whose root is page root, or, when root is 0,
// the inline leaf page inline. depth counts nested buckets.
func (v *verifier) bucket(root uint64, inline []byte, depth int) error {
	if depth > 64 {
		return errors.New("buckets nested more than 64 deep")
	}
	if root == 0 {
		if len(inline) < pageHeaderSize {
			return errors.New("inline bucket shorter than a page header")
		}
		if flags := ne.Uint16(inline[8:]); flags != flagLeaf {
			return fmt.Errorf("inline bucket page has flags %#x, want a leaf", flags)
		}
		return v.node(inline, "inline bucket", nil, nil, depth)
	}
	return v.subtree(root, nil, nil, depth)
}

// subtree checks page id and below; every key must be in [lo, hi) (nil:
// unbounded).
func (v *verifier) subtree(id uint64, lo, hi []byte, depth int) error {
	p, err := v.page(id, flagBranch|flagLeaf)
	if err != nil {
		return err
	}
	return v.node(p, fmt.Sprintf("page %d", id), lo, hi, depth)
}

// node checks the elements of the branch or leaf page p.
func (v *verifier) node(p []byte, name string, lo, hi []byte, depth int) error {
	flags := ne.Uint16(p[8:])
	count := int(ne.Uint16(p[10:]))
	if flags != flagBranch && flags != flagLeaf {
		return fmt.Errorf("%s has flags %#x, want a branch or a leaf", name, flags)
	}
	if pageHeaderSize+count*elementSize > len(p) {
		return fmt.Errorf("%s: %d elements do not fit it", name, count)
	}
	if flags == flagBranch && count == 0 {
		return fmt.Errorf("%s: a branch page with no elements", name)
	}
	type elem struct {
		key, val []byte
		flags    uint32
		child    uint64
	}
	elems := make([]elem, count)
	var prev []byte
	for i := range elems {
		off := pageHeaderSize + i*elementSize
		e := p[off:]
		var pos, ksize, vsize uint64
		if flags == flagBranch {
			pos, ksize = uint64(ne.Uint32(e[0:])), uint64(ne.Uint32(e[4:]))
			elems[i].child = ne.Uint64(e[8:])
		} else {
			elems[i].flags = ne.Uint32(e[0:])
			pos, ksize, vsize = uint64(ne.Uint32(e[4:])), uint64(ne.Uint32(e[8:])), uint64(ne.Uint32(e[12:]))
		}
		start := uint64(off) + pos
		if start+ksize+vsize > uint64(len(p)) {
			return fmt.Errorf("%s: element %d lies outside the page", name, i)
		}
		key := p[start : start+ksize]
		switch {
		case ksize == 0 || ksize > maxKeySize:
			return fmt.Errorf("%s: element %d has a key of %d bytes", name, i, ksize)
		case prev != nil && bytes.Compare(prev, key) >= 0:
			return fmt.Errorf("%s: element %d is out of key order", name, i)
		case lo != nil && bytes.Compare(key, lo) < 0, hi != nil && bytes.Compare(key, hi) >= 0:
			return fmt.Errorf("%s: element %d has a key outside its parent's range", name, i)
		case elems[i].flags&^leafBucketFlag != 0:
			return fmt.Errorf("%s: element %d has flags %#x", name, i, elems[i].flags)
		}
		prev = key
		elems[i].key, elems[i].val = key, p[start+ksize:start+ksize+vsize]
	}
	for i, e := range elems {
		if flags == flagBranch {
			var next []byte
			if i+1 < len(elems) {
				next = elems[i+1].key
			} else {
				next = hi
			}
			if err := v.subtree(e.child, e.key, next, depth); err != nil {
				return err
			}
			continue
		}
		if e.flags&leafBucketFlag == 0 {
			continue
		}
		if len(e.val) < bucketHeaderSize {
			return fmt.Errorf("%s: bucket %q has a %d-byte header", name, e.key, len(e.val))
		}
		if err := v.bucket(ne.Uint64(e.val), e.val[bucketHeaderSize:], depth+1); err != nil {
			return fmt.Errorf("bucket %q: %w", e.key, err)
		}
	}
	return nil
}
