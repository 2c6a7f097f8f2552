package video

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"slices"
	"strconv"
	"strings"
)

// syncFile flushes path to disk: on file systems that allocate at
// write-back, a full disk shows up here and not in ffmpeg's writes.
func syncFile(path string) error {
	fh, err := os.OpenFile(path, os.O_RDWR, 0)
	if err != nil {
		return err
	}
	err = fh.Sync()
	if cerr := fh.Close(); err == nil {
		err = cerr
	}
	return err
}

// verifyFile checks that the file ffmpeg wrote at path is whole and holds
// frames frames: an MP4's structure and sample table here, a Matroska
// file's start here and its frames through ffprobe (where installed).
func verifyFile(ctx context.Context, path, format string, frames int) error {
	fh, err := os.Open(path)
	if err != nil {
		return err
	}
	defer fh.Close()
	st, err := fh.Stat()
	if err != nil {
		return err
	}
	if format == "matroska" {
		if err := VerifyMatroska(fh, st.Size()); err != nil {
			return err
		}
		return probeFrames(ctx, path, frames)
	}
	if err := VerifyMP4(fh, st.Size()); err != nil {
		return err
	}
	n, err := MP4Frames(fh, st.Size())
	if err != nil {
		return err
	}
	if n != frames {
		return fmt.Errorf("its index lists %d frames, %d were written", n, frames)
	}
	return nil
}

// VerifyMP4 checks that an MP4 (or QuickTime .mov) of size bytes is whole:
// its top-level boxes tile the file exactly, the first is ftyp, and a moov
// (with mvhd and a trak inside, themselves tiling it) and an mdat are
// there. A file cut short — a full disk, a killed writer — fails: a box
// runs past the end, or the moov ffmpeg writes last is missing.
func VerifyMP4(r io.ReaderAt, size int64) error {
	if size == 0 {
		return errors.New("the file is empty")
	}
	top, err := mp4Boxes(r, 0, size)
	if err != nil {
		return err
	}
	if top[0].typ != "ftyp" {
		return fmt.Errorf("the first box is %q, not ftyp", top[0].typ)
	}
	var moov *mp4Box
	mdat := false
	for i := range top {
		switch top[i].typ {
		case "moov":
			moov = &top[i]
		case "mdat":
			mdat = true
		}
	}
	if moov == nil {
		return errors.New("no moov box (the index ffmpeg writes last): the file was cut short")
	}
	if !mdat {
		return errors.New("no mdat box: no video data")
	}
	inner, err := mp4Boxes(r, moov.body, moov.end)
	if err != nil {
		return fmt.Errorf("moov: %w", err)
	}
	var mvhd, trak bool
	for _, b := range inner {
		mvhd = mvhd || b.typ == "mvhd"
		trak = trak || b.typ == "trak"
	}
	if !mvhd || !trak {
		return errors.New("moov has no mvhd or no trak")
	}
	return nil
}

type mp4Box struct {
	typ       string
	body, end int64 // the payload's offset, and the box's end
}

// mp4Boxes reads the boxes that fill [off, end) exactly.
func mp4Boxes(r io.ReaderAt, off, end int64) ([]mp4Box, error) {
	var boxes []mp4Box
	var hdr [16]byte
	for off < end {
		if end-off < 8 {
			return nil, fmt.Errorf("%d stray bytes at offset %d", end-off, off)
		}
		if _, err := r.ReadAt(hdr[:8], off); err != nil {
			return nil, fmt.Errorf("reading the box at offset %d: %w", off, err)
		}
		size := int64(binary.BigEndian.Uint32(hdr[:4]))
		typ := string(hdr[4:8])
		head := int64(8)
		switch size {
		case 0: // to the end of the file
			size = end - off
		case 1: // a 64-bit size follows
			if end-off < 16 {
				return nil, fmt.Errorf("box %q at offset %d: cut short in its header", typ, off)
			}
			if _, err := r.ReadAt(hdr[8:16], off+8); err != nil {
				return nil, fmt.Errorf("reading the box at offset %d: %w", off, err)
			}
			size, head = int64(binary.BigEndian.Uint64(hdr[8:16])), 16
		}
		if size < head {
			return nil, fmt.Errorf("box %q at offset %d: size %d is smaller than its header", typ, off, size)
		}
		if size > end-off {
			return nil, fmt.Errorf("box %q at offset %d: %d bytes, but only %d remain: the file was cut short", typ, off, size, end-off)
		}
		boxes = append(boxes, mp4Box{typ: typ, body: off + head, end: off + size})
		off += size
	}
	if len(boxes) == 0 {
		return nil, errors.New("no boxes")
	}
	return boxes, nil
}

// VerifyMatroska checks a Matroska file's start: the EBML header, then a
// Segment whose size, when known, ends exactly at the file's end.
// Matroska keeps no single index to check as MP4's moov, so ffprobe's
// frame count (where installed) does the rest.
func VerifyMatroska(r io.ReaderAt, size int64) error {
	id, n, len1, err := ebmlElement(r, 0, size)
	if err != nil {
		return err
	}
	if id != 0x1A45DFA3 {
		return errors.New("no EBML header")
	}
	off := n + len1
	id, n, len2, err := ebmlElement(r, off, size)
	if err != nil {
		return fmt.Errorf("after the EBML header: %w", err)
	}
	if id != 0x18538067 {
		return fmt.Errorf("element %#x after the EBML header, want a Segment", id)
	}
	if len2 >= 0 && off+n+len2 != size {
		return fmt.Errorf("the Segment says %d bytes, the file has %d after its header: the file was cut short", len2, size-off-n)
	}
	return nil
}

// ebmlElement reads the element header at off: its ID, the header's
// length and the payload's (−1: unknown).
func ebmlElement(r io.ReaderAt, off, size int64) (id uint64, n, length int64, err error) {
	var b [12]byte
	k, _ := r.ReadAt(b[:], off)
	buf := b[:k]
	vint := func(p []byte, keepMarker bool) (uint64, int, bool) {
		if len(p) == 0 || p[0] == 0 {
			return 0, 0, false
		}
		w := 1
		for p[0]&(0x80>>(w-1)) == 0 {
			w++
		}
		if len(p) < w {
			return 0, 0, false
		}
		v := uint64(p[0])
		if !keepMarker {
			v &^= 0x80 >> (w - 1)
		}
		for _, c := range p[1:w] {
			v = v<<8 | uint64(c)
		}
		return v, w, true
	}
	id, wi, ok := vint(buf, true)
	if !ok {
		return 0, 0, 0, fmt.Errorf("offset %d: no element: the file was cut short", off)
	}
	l, wl, ok := vint(buf[wi:], false)
	if !ok {
		return 0, 0, 0, fmt.Errorf("offset %d: element %#x has no size: the file was cut short", off, id)
	}
	n = int64(wi + wl)
	if l == 1<<(7*wl)-1 {
		return id, n, -1, nil
	}
	if int64(l) > size-off-n {
		return 0, 0, 0, fmt.Errorf("element %#x at offset %d: %d bytes, but only %d remain: the file was cut short", id, off, l, size-off-n)
	}
	return id, n, int64(l), nil
}

// probeFrames has ffprobe (when installed) count the video packets of
// path, which must be frames. Counting packets reads the file without
// decoding it.
func probeFrames(ctx context.Context, path string, frames int) error {
	bin, err := exec.LookPath("ffprobe")
	if err != nil {
		return nil
	}
	cmd := exec.CommandContext(ctx, bin, "-v", "error", "-select_streams", "v:0", "-count_packets",
		"-show_entries", "stream=nb_read_packets", "-of", "csv=p=0", path)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err = cmd.Run()
	if msg := strings.TrimSpace(stderr.String()); err != nil || msg != "" {
		if msg == "" {
			msg = err.Error()
		}
		return fmt.Errorf("ffprobe: %s", msg)
	}
	got, err := strconv.Atoi(strings.TrimSpace(stdout.String()))
	if err != nil {
		return fmt.Errorf("ffprobe counted %q frames", strings.TrimSpace(stdout.String()))
	}
	if got != frames {
		return fmt.Errorf("ffprobe finds %d frames, %d were written", got, frames)
	}
	return nil
}

// MP4Frames counts the frames of an MP4's (or .mov's) first video track
// from its sample table, the index a player reads, and checks that every
// frame's bytes lie inside an mdat box of the file — a whole index that
// points at data the file holds. It reads what ffprobe's packet count
// reads, without starting a process. A fragmented MP4 (moof boxes: frames
// indexed outside the moov) is an error here; ffmpeg writes none unless
// asked to.
func MP4Frames(r io.ReaderAt, size int64) (int, error) {
	top, err := mp4Boxes(r, 0, size)
	if err != nil {
		return 0, err
	}
	var mdats []mp4Box
	var moov *mp4Box
	for i, b := range top {
		switch b.typ {
		case "mdat":
			mdats = append(mdats, b)
		case "moov":
			moov = &top[i]
		case "moof":
			return 0, errors.New("a fragmented MP4: frames indexed outside the moov")
		}
	}
	if moov == nil {
		return 0, errors.New("no moov box")
	}
	traks, err := mp4Boxes(r, moov.body, moov.end)
	if err != nil {
		return 0, fmt.Errorf("moov: %w", err)
	}
	for _, trak := range traks {
		if trak.typ != "trak" {
			continue
		}
		stbl, video, err := mp4VideoTable(r, trak)
		if err != nil {
			return 0, err
		}
		if video {
			return mp4Samples(r, stbl, mdats)
		}
	}
	return 0, errors.New("no video track")
}

// mp4Child is the box of type typ inside parent (ok false where absent).
func mp4Child(r io.ReaderAt, parent mp4Box, typ string) (mp4Box, bool, error) {
	kids, err := mp4Boxes(r, parent.body, parent.end)
	if err != nil {
		return mp4Box{}, false, fmt.Errorf("%s: %w", parent.typ, err)
	}
	for _, k := range kids {
		if k.typ == typ {
			return k, true, nil
		}
	}
	return mp4Box{}, false, nil
}

// mp4VideoTable finds trak's sample table (mdia/minf/stbl) and whether its
// handler (mdia/hdlr) is video's, "vide".
func mp4VideoTable(r io.ReaderAt, trak mp4Box) (stbl mp4Box, video bool, err error) {
	mdia, ok, err := mp4Child(r, trak, "mdia")
	if err != nil || !ok {
		return stbl, false, err
	}
	hdlr, ok, err := mp4Child(r, mdia, "hdlr")
	if err != nil || !ok {
		return stbl, false, err
	}
	var h [12]byte // version and flags, pre_defined, handler_type
	if hdlr.end-hdlr.body < 12 {
		return stbl, false, errors.New("hdlr: cut short")
	}
	if _, err := r.ReadAt(h[:], hdlr.body); err != nil {
		return stbl, false, fmt.Errorf("hdlr: %w", err)
	}
	if string(h[8:12]) != "vide" {
		return stbl, false, nil
	}
	minf, ok, err := mp4Child(r, mdia, "minf")
	if err == nil && ok {
		stbl, ok, err = mp4Child(r, minf, "stbl")
	}
	if err == nil && !ok {
		err = errors.New("the video track has no sample table (mdia/minf/stbl)")
	}
	return stbl, err == nil, err
}

// mp4Samples reads the sample table stbl — sizes (stsz), chunks (stsc)
// and their offsets (stco or co64) — and checks that each sample lies in
// one of mdats; it returns the number of samples.
func mp4Samples(r io.ReaderAt, stbl mp4Box, mdats []mp4Box) (int, error) {
	kids, err := mp4Boxes(r, stbl.body, stbl.end)
	if err != nil {
		return 0, fmt.Errorf("stbl: %w", err)
	}
	body := func(typ string) ([]byte, bool, error) {
		i := slices.IndexFunc(kids, func(b mp4Box) bool { return b.typ == typ })
		if i < 0 {
			return nil, false, nil
		}
		b := kids[i]
		p := make([]byte, b.end-b.body) // within the file, which the caller holds
		if _, err := r.ReadAt(p, b.body); err != nil {
			return nil, true, fmt.Errorf("%s: %w", typ, err)
		}
		if len(p) < 8 { // version and flags, then a count
			return nil, true, fmt.Errorf("%s: cut short", typ)
		}
		return p, true, nil
	}
	u32 := func(p []byte, i int) uint64 { return uint64(binary.BigEndian.Uint32(p[i:])) }
	// entries checks that a table of n entries of w bytes from offset off fits p.
	entries := func(typ string, p []byte, off int, n uint64, w int) error {
		if n > uint64(len(p)-off)/uint64(w) {
			return fmt.Errorf("%s: %d entries of %d bytes in %d", typ, n, w, len(p)-off)
		}
		return nil
	}

	stsz, ok, err := body("stsz")
	if err != nil {
		return 0, err
	}
	if !ok || len(stsz) < 12 {
		return 0, errors.New("the video track has no sample sizes (stsz)")
	}
	fixed, count := u32(stsz, 4), u32(stsz, 8)
	if fixed == 0 {
		if err := entries("stsz", stsz, 12, count, 4); err != nil {
			return 0, err
		}
	}
	sampleSize := func(i uint64) uint64 {
		if fixed != 0 {
			return fixed
		}
		return u32(stsz, 12+4*int(i))
	}

	stsc, ok, err := body("stsc")
	if err != nil {
		return 0, err
	}
	if !ok {
		return 0, errors.New("the video track has no sample-to-chunk table (stsc)")
	}
	runs := u32(stsc, 4)
	if err := entries("stsc", stsc, 8, runs, 12); err != nil {
		return 0, err
	}

	// The chunks' offsets: 32-bit (stco) or 64-bit (co64).
	co, ok, err := body("stco")
	typ, w := "stco", 4
	if err == nil && !ok {
		co, ok, err = body("co64")
		typ, w = "co64", 8
	}
	if err != nil {
		return 0, err
	}
	if !ok {
		return 0, errors.New("the video track has no chunk offsets (stco or co64)")
	}
	chunks := u32(co, 4)
	if err := entries(typ, co, 8, chunks, w); err != nil {
		return 0, err
	}
	offsets := make([]uint64, chunks)
	for i := range offsets {
		if e := co[8+w*i:]; w == 4 {
			offsets[i] = u32(e, 0)
		} else {
			offsets[i] = binary.BigEndian.Uint64(e)
		}
	}

	// Walk the chunks: run k covers chunks [first_k, first_{k+1}), each of
	// samples_per_chunk samples laid end to end from the chunk's offset.
	var sample uint64
	for k := range runs {
		e := stsc[8+12*int(k):]
		first, per := u32(e, 0), u32(e, 4)
		last := uint64(len(offsets)) // the last run reaches the last chunk
		if k+1 < runs {
			last = u32(stsc[8+12*int(k+1):], 0) - 1
		}
		if first < 1 || last > uint64(len(offsets)) || first > last+1 {
			return 0, fmt.Errorf("stsc: chunks %d to %d of %d", first, last, len(offsets))
		}
		for c := first; c <= last; c++ {
			off := offsets[c-1]
			for range per {
				if sample == count {
					return 0, fmt.Errorf("the chunks hold more samples than stsz's %d", count)
				}
				size := sampleSize(sample)
				if !inside(mdats, off, size) {
					return 0, fmt.Errorf("sample %d (%d bytes at offset %d) lies outside the file's mdat: the file was cut short or its index is wrong", sample+1, size, off)
				}
				off += size
				sample++
			}
		}
	}
	if sample != count {
		return 0, fmt.Errorf("the chunks hold %d samples, stsz lists %d", sample, count)
	}
	return int(count), nil
}

// inside says whether [off, off+size) lies within one of the boxes' bodies.
func inside(boxes []mp4Box, off, size uint64) bool {
	for _, b := range boxes {
		if off >= uint64(b.body) && off <= uint64(b.end) && size <= uint64(b.end)-off {
			return true
		}
	}
	return false
}
