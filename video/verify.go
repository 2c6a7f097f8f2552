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

// verifyFile checks the container structure of the file ffmpeg wrote.
func verifyFile(path, format string) error {
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
		return VerifyMatroska(fh, st.Size())
	}
	return VerifyMP4(fh, st.Size())
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
