package artifact

import (
	"fmt"
	"os"

	getter "github.com/hashicorp/go-getter/v2"

	"github.com/meshlet/meshlet/structs"
)

// decompressors returns go-getter's decompressors for
// structs.ArtifactArchiveTypes, bounded in files and expanded bytes.
// go-getter fails a tar or zip archive over the limit but silently
// truncates a single gzip file at it; sizeChecked turns that into
// ErrTooLarge.
func decompressors(maxFiles int, maxBytes int64) map[string]getter.Decompressor {
	all := getter.LimitedDecompressors(maxFiles, maxBytes)
	all["gz"] = &sizeChecked{inner: &getter.GzipDecompressor{FileSizeLimit: maxBytes + 1}, max: maxBytes}
	out := map[string]getter.Decompressor{}
	for _, typ := range structs.ArtifactArchiveTypes {
		out[typ] = all[typ]
	}
	return out
}

// sizeChecked fails a single-file decompression whose result is over max
// bytes (the inner decompressor stops one byte past it).
type sizeChecked struct {
	inner getter.Decompressor
	max   int64
}

func (d *sizeChecked) Decompress(dst, src string, dir bool, umask os.FileMode) error {
	if err := d.inner.Decompress(dst, src, dir, umask); err != nil {
		return err
	}
	fi, err := os.Lstat(dst)
	if err != nil {
		return fmt.Errorf("failed to check unpacked artifact: %w", err)
	}
	if fi.Size() > d.max {
		_ = os.Remove(dst)
		return fmt.Errorf("%w: %s unpacks to more than %d bytes", ErrTooLarge, src, d.max)
	}
	return nil
}
