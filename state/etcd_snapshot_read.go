package state

import (
	"bufio"
	"compress/gzip"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"io"
)

// readSnapshot reads and verifies a whole snapshot.
func readSnapshot(r io.Reader) (*snapshotData, error) {
	zr, err := gzip.NewReader(r)
	if err != nil {
		return nil, badSnapshot("not a gzip stream: %w", err)
	}
	br := bufio.NewReaderSize(&capReader{r: zr, left: maxSnapshotBytes}, 64<<10)
	sum := sha256.New()
	line, err := br.ReadBytes('\n')
	if err != nil {
		return nil, badSnapshot("no header: %w", err)
	}
	sum.Write(line)
	hdr := new(SnapshotHeader)
	if err := json.Unmarshal(line, hdr); err != nil || hdr.Version == 0 || hdr.ClusterID == "" {
		return nil, badSnapshot("no meshlet snapshot header")
	}
	if hdr.Version > snapshotVersion || hdr.Format > etcdFormat {
		return nil, badSnapshot("snapshot version %d, state format %d: newer than this meshlet reads (%d, %d)",
			hdr.Version, hdr.Format, snapshotVersion, etcdFormat)
	}
	if err := checkSectionHeaders(hdr); err != nil {
		return nil, err
	}
	d, trailer, err := readEntries(br, sum, hdr)
	if err != nil {
		return nil, err
	}
	if got := hex.EncodeToString(sum.Sum(nil)); got != trailer {
		return nil, badSnapshot("checksum mismatch: the snapshot says %s, its content is %s", trailer, got)
	}
	if len(d.kvs) != hdr.Keys {
		return nil, badSnapshot("%d keys, the header says %d", len(d.kvs), hdr.Keys)
	}
	for i, h := range hdr.Sections {
		if len(d.secKVs[i]) != h.Keys {
			return nil, badSnapshot("%d keys in section %s, the header says %d", len(d.secKVs[i]), h.Name, h.Keys)
		}
	}
	// Reading to the end also checks the gzip CRC.
	switch _, err := br.ReadByte(); {
	case err == nil:
		return nil, badSnapshot("data after the trailer")
	case !errors.Is(err, io.EOF):
		return nil, badSnapshot("%w", err)
	}
	return d, nil
}

// checkSectionHeaders: sections only from version 2, named, each once.
func checkSectionHeaders(hdr *SnapshotHeader) error {
	if hdr.Version < 2 && len(hdr.Sections) > 0 {
		return badSnapshot("a version %d snapshot with sections", hdr.Version)
	}
	seen := map[string]bool{}
	for _, h := range hdr.Sections {
		if h.Name == "" || seen[h.Name] || h.Keys < 0 {
			return badSnapshot("section %q: unnamed, listed twice or with a negative count", h.Name)
		}
		seen[h.Name] = true
	}
	return nil
}

// readEntries reads the key lines (adding them to sum) up to the trailer,
// and returns the trailer's checksum: the state's keys first, then each
// section's in the header's order, keys in order within each.
func readEntries(br *bufio.Reader, sum io.Writer, hdr *SnapshotHeader) (*snapshotData, string, error) {
	d := &snapshotData{hdr: hdr, secKVs: make([][]kv, len(hdr.Sections))}
	sec := -1 // the section being read (index in hdr.Sections); -1: the state
	for n := 2; ; n++ {
		line, err := br.ReadBytes('\n')
		if err != nil {
			return nil, "", badSnapshot("truncated at line %d: %w", n, err)
		}
		var l snapshotLine
		if err := json.Unmarshal(line, &l); err != nil {
			return nil, "", badSnapshot("line %d: %w", n, err)
		}
		switch {
		case l.Sum != nil:
			return d, *l.Sum, nil
		case l.K == nil || *l.K == "":
			return nil, "", badSnapshot("line %d has no key", n)
		case l.S == nil && sec >= 0:
			return nil, "", badSnapshot("line %d: a state key after the sections' keys", n)
		}
		for l.S != nil && (sec < 0 || hdr.Sections[sec].Name != *l.S) {
			if sec++; sec == len(hdr.Sections) {
				return nil, "", badSnapshot("line %d: section %q is not in the header, or out of order", n, *l.S)
			}
		}
		list := &d.kvs
		if sec >= 0 {
			list = &d.secKVs[sec]
		}
		if len(*list) > 0 && *l.K <= (*list)[len(*list)-1].key {
			return nil, "", badSnapshot("line %d: key %q out of order", n, *l.K)
		}
		_, _ = sum.Write(line)
		*list = append(*list, kv{key: *l.K, val: l.V})
	}
}

// capReader fails once more than left bytes were read.
type capReader struct {
	r    io.Reader
	left int64
}

func (c *capReader) Read(p []byte) (int, error) {
	if c.left <= 0 {
		return 0, badSnapshot("larger than %d bytes uncompressed", int64(maxSnapshotBytes))
	}
	if int64(len(p)) > c.left {
		p = p[:c.left]
	}
	n, err := c.r.Read(p)
	c.left -= int64(n)
	return n, err
}
