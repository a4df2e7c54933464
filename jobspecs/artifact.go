package jobspecs

import (
	"crypto/md5"
	"crypto/sha1"
	"crypto/sha256"
	"crypto/sha512"
	"encoding/hex"
	"fmt"
	"net/url"
	"path/filepath"
	"slices"
	"strconv"
	"strings"

	"github.com/hashicorp/hcl/v2/hclsyntax"

	"github.com/meshlet/meshlet/structs"
)

// artifactSpec is Nomad's artifact block.
var artifactSpec = spec{attrs: []string{"source", "destination", "mode", "chown", "insecure"}, maps: []string{"options", "headers"}}

// artifactOptions are the go-getter options meshlet's getters use; others
// are passed on as URL query parameters, as go-getter does.
var artifactOptions = []string{"checksum", "archive", "filename"}

func (d *decoder) decodeArtifact(b *hclsyntax.Block, p path) *structs.TaskArtifact {
	d.rec(p, b.DefRange())
	c := d.content(b.Body, artifactSpec)
	a := &structs.TaskArtifact{}
	d.setStr(c, p, "source", &a.GetterSource)
	d.setStr(c, p, "destination", &a.RelativeDest)
	d.setStr(c, p, "mode", &a.GetterMode)
	d.setBool(c, p, "chown", &a.Chown)
	d.setBool(c, p, "insecure", &a.GetterInsecure)
	a.GetterOptions = d.strMap(c, p, "options")
	a.GetterHeaders = d.strMap(c, p, "headers")
	return a
}

// interpolated: the value is expanded by the client when the task starts
// (Nomad skips checking those too).
func interpolated(s string) bool { return strings.Contains(s, "${") }

// checkArtifacts applies Nomad's TaskArtifact.Validate, with meshlet's
// getters (http, https, local files).
func checkArtifacts(arts []*structs.TaskArtifact, p path, report reporter) {
	for i, a := range arts {
		if a == nil {
			continue
		}
		ap := p.item("artifact", i, "")
		switch {
		case strings.TrimSpace(a.GetterSource) == "":
			// At the source's key: a source that failed to decode is
			// not reported twice.
			report(SeverityError, ap.attr("source"), "Missing artifact source", "source must be specified.")
		case !interpolated(a.GetterSource):
			if msg := artifactSourceProblem(a.GetterSource); msg != "" {
				report(SeverityError, ap.attr("source"), "Unsupported artifact source", msg)
			}
		}
		switch a.GetterMode {
		case "", structs.ArtifactModeAny, structs.ArtifactModeFile, structs.ArtifactModeDir:
		default:
			report(SeverityError, ap.attr("mode"), "Invalid artifact mode", fmt.Sprintf(
				"invalid artifact mode %q; must be one of: any, file, dir.", a.GetterMode))
		}
		if dest := a.RelativeDest; !interpolated(dest) && DestEscapes(dest) {
			report(SeverityError, ap.attr("destination"), "Invalid artifact destination", fmt.Sprintf(
				"destination %q escapes the task directory.", dest))
		}
		checkArtifactOptions(a, ap, report)
	}
}

// DestEscapes reports whether an artifact destination, taken relative to
// the task dir (a leading "/" too, as Nomad does), leaves it.
func DestEscapes(dest string) bool {
	rel := filepath.Clean(strings.TrimLeft(dest, "/"))
	return rel == ".." || strings.HasPrefix(rel, "../")
}

func checkArtifactOptions(a *structs.TaskArtifact, ap path, report reporter) {
	op := ap.attr("options")
	if c, ok := a.GetterOptions["checksum"]; ok && !interpolated(c) {
		if err := CheckChecksum(c); err != "" {
			report(SeverityError, op, "Invalid artifact checksum", err)
		}
	}
	if v, ok := a.GetterOptions["archive"]; ok && !interpolated(v) {
		if _, err := strconv.ParseBool(v); err != nil && !slices.Contains(structs.ArtifactArchiveTypes, v) {
			report(SeverityError, op, "Invalid artifact archive option", fmt.Sprintf(
				"archive %q must be false, true or one of: %s.", v, strings.Join(structs.ArtifactArchiveTypes, ", ")))
		}
	}
	for _, k := range sortedKeys(a.GetterOptions) {
		if !slices.Contains(artifactOptions, k) {
			report(SeverityWarning, op, fmt.Sprintf("Artifact option %q is passed on as a URL query parameter", k),
				fmt.Sprintf("meshlet's getters (http, https, file) use only %s.", strings.Join(artifactOptions, ", ")))
		}
	}
}

func sortedKeys(m map[string]string) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	slices.Sort(out)
	return out
}

// CheckChecksum returns Nomad's message for a checksum option that is not
// "type:value" with a known type and a hex value of its length; "" when it
// is valid.
func CheckChecksum(check string) string {
	check = strings.TrimSpace(check)
	if check == "" {
		return "checksum value cannot be empty."
	}
	typ, val, ok := strings.Cut(check, ":")
	if !ok || strings.Contains(val, ":") {
		return fmt.Sprintf("checksum must be given as \"type:value\"; got %q.", check)
	}
	b, err := hex.DecodeString(val)
	if err != nil {
		return fmt.Sprintf("invalid checksum: %v.", err)
	}
	sizes := map[string]int{"md5": md5.Size, "sha1": sha1.Size, "sha256": sha256.Size, "sha512": sha512.Size}
	want, known := sizes[typ]
	switch {
	case !known:
		return fmt.Sprintf("unsupported checksum type: %s; use md5, sha1, sha256 or sha512.", typ)
	case len(b) != want:
		return fmt.Sprintf("invalid %s checksum: %s.", typ, val)
	}
	return ""
}

// artifactSourceProblem explains why meshlet's getters cannot fetch src;
// "" when they can.
func artifactSourceProblem(src string) string {
	if forced, _, ok := strings.Cut(src, "::"); ok && !strings.Contains(forced, "/") {
		switch forced {
		case "http", "https", "file":
			return ""
		}
		return fmt.Sprintf("meshlet fetches artifacts over http, https and from local files; the %q getter of %q is not available.", forced, src)
	}
	u, err := url.Parse(src)
	if err != nil || u.Scheme == "" {
		return "" // a local path, relative to the task dir
	}
	switch u.Scheme {
	case "http", "https", "file":
		return ""
	}
	return fmt.Sprintf("meshlet fetches artifacts over http, https and from local files; scheme %q of %q is not supported.", u.Scheme, src)
}
