package jobspecs

import (
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"

	"github.com/hashicorp/hcl/v2"
	"github.com/hashicorp/hcl/v2/hclsyntax"

	"github.com/meshlet/meshlet/structs"
)

// ParseOptions tunes Parse. A nil *ParseOptions is valid.
type ParseOptions struct {
	// Vars are -var overrides for the jobspec's variable blocks: a name the
	// jobspec does not declare is an error.
	Vars map[string]string
	// FileVars are the values of -var-file files, in order (a later file
	// wins); Vars win over them. A name the jobspec does not declare is a
	// warning, as in Nomad.
	FileVars []VarFile
	// FileDir, when set, offers file(path) and fileexists(path), reading
	// relative to it (ParseFile sets it to the jobspec's directory). The
	// servers parse jobspecs sent to them without it: a jobspec must not
	// read the server's files.
	FileDir string
	// EnvVars are NOMAD_VAR_<name> values from the environment, the
	// weakest overrides (only a default loses to them); names the jobspec
	// does not declare are ignored.
	EnvVars map[string]string
	// Limits bound the source size and the cost of evaluating it; nil
	// (or a zero field) means DefaultLimits.
	Limits *Limits
	// Validate tunes the job's validation (count and size limits).
	Validate *ValidateOptions
	// SkipCanonicalize returns the job as written, without the defaults
	// Canonicalize fills (PUT /v1/jobs/parse with Canonicalize false).
	SkipCanonicalize bool
}

// Parse parses one jobspec. filename is used in diagnostics. The job is
// canonicalized and validated; it is nil only if errors prevent building it
// (syntax errors, no job block). Diagnostics are sorted by position.
func Parse(filename string, src []byte, opts *ParseOptions) (*structs.Job, Diagnostics) {
	if opts == nil {
		opts = &ParseOptions{}
	}
	lim := opts.Limits.withDefaults()
	if len(src) > lim.MaxSourceBytes {
		return nil, Diagnostics{{Severity: SeverityError, Filename: filename, Summary: "Jobspec too large",
			Detail: fmt.Sprintf("The jobspec is %d bytes; the limit is %d bytes.", len(src), lim.MaxSourceBytes)}}
	}
	if ds := scanSource(src, filename, lim); ds != nil {
		return nil, ds
	}
	src = rewriteQuotedKeyBlocks(src, filename)
	file, hds := hclsyntax.ParseConfig(src, filename, hcl.InitialPos)
	if hds.HasErrors() {
		ds := fromHCL(hds)
		sortDiagnostics(ds)
		return nil, ds
	}
	body, ok := file.Body.(*hclsyntax.Body)
	if !ok {
		return nil, Diagnostics{{Severity: SeverityError, Filename: filename, Summary: "Unsupported jobspec syntax"}}
	}
	d := newDecoder(src, lim)
	d.budget.fileDir = opts.FileDir
	d.diags = fromHCL(hds)
	if hds := boundBody(body); hds.HasErrors() {
		ds := fromHCL(hds)
		sortDiagnostics(ds)
		return nil, ds
	}
	top := d.content(body, spec{blocks: []string{"job", "variable", "variables", "locals"}})
	d.buildContext(top, filename, opts)
	jb := d.one(top, "job")
	if jb == nil {
		d.diags = append(d.diags, Diagnostic{Severity: SeverityError, Filename: filename,
			Summary: "Missing job block", Detail: `A jobspec must contain one job "name" { ... } block.`})
		sortDiagnostics(d.diags)
		return nil, d.diags
	}
	job := d.decodeJob(jb)
	if d.budget.exhausted {
		return nil, limitDiags(d.diags)
	}
	if job == nil {
		sortDiagnostics(d.diags)
		return nil, d.diags
	}
	// Validate what the user wrote, then fill defaults: defaults are valid
	// by construction, and values a task inherits from its group would
	// otherwise be reported twice.
	interpolateConnectNames(job) // Nomad checks connect names after this
	checkJob(job, opts.Validate.withDefaults(), d.report)
	if !opts.SkipCanonicalize {
		Canonicalize(job)
	}
	sortDiagnostics(d.diags)
	return job, uniqueDiagnostics(d.diags)
}

// limitDiags keeps the evaluation limit errors of a parse that ran out of
// budget, once each: what followed was evaluated without functions and
// would only add noise.
func limitDiags(ds Diagnostics) Diagnostics {
	var out Diagnostics
	seen := map[string]bool{}
	for _, d := range ds {
		if (d.Summary == limitSummary || strings.HasPrefix(d.Summary, "Invalid value for variable")) && !seen[d.Detail] {
			seen[d.Detail] = true
			out = append(out, d)
		}
	}
	sortDiagnostics(out)
	return out
}

// ParseFile reads and parses a jobspec file; diagnostics name it by path.
func ParseFile(path string, opts *ParseOptions) (*structs.Job, Diagnostics) {
	var lim *Limits
	if opts != nil {
		lim = opts.Limits
	}
	src, err := readLimited(path, lim.withDefaults().MaxSourceBytes)
	if err != nil {
		return nil, Diagnostics{{Severity: SeverityError, Filename: path,
			Summary: "Failed to read jobspec", Detail: fmt.Sprintf("failed to read %s: %v", filepath.Base(path), err)}}
	}
	o := ParseOptions{}
	if opts != nil {
		o = *opts
	}
	if o.FileDir == "" {
		o.FileDir = filepath.Dir(path)
	}
	return Parse(path, src, &o)
}

// readLimited reads a file, but no more than one byte past limit, so that
// Parse reports a file that is too large without reading all of it.
func readLimited(path string, limit int) ([]byte, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	return io.ReadAll(io.LimitReader(f, int64(limit)+1))
}

// report turns a validation finding into a positioned diagnostic. A finding
// on a value that already failed to decode is dropped as a duplicate; a key
// without a recorded range falls back to its nearest recorded parent.
func (d *decoder) report(sev Severity, at path, summary, detail string) {
	if d.failed[at.key] {
		return
	}
	var rng hcl.Range
	for k := at.key; k != ""; k = parentKey(k) {
		if r, ok := d.ranges[k]; ok {
			rng = r
			break
		}
	}
	d.add(sev, rng, summary, detail)
}

// rewriteQuotedKeyBlocks lets HCL1-style `env { "a.b" = "c" }` and
// `meta { "k" = "v" }` blocks parse: HCL2 forbids quoted argument names in
// blocks, so such a block is turned into the equivalent map argument
// `env = { ... }`. When a space precedes the brace it becomes the "=",
// which keeps every position unchanged.
func rewriteQuotedKeyBlocks(src []byte, filename string) []byte {
	toks, _ := hclsyntax.LexConfig(src, filename, hcl.InitialPos)
	var edits []int // byte offsets of the opening braces to rewrite
	for i := 0; i+1 < len(toks); i++ {
		t := toks[i]
		if t.Type != hclsyntax.TokenIdent || (string(t.Bytes) != "env" && string(t.Bytes) != "meta") {
			continue
		}
		if i > 0 && toks[i-1].Type != hclsyntax.TokenNewline && toks[i-1].Type != hclsyntax.TokenOBrace {
			continue
		}
		if toks[i+1].Type != hclsyntax.TokenOBrace || !hasQuotedKey(toks[i+2:]) {
			continue
		}
		edits = append(edits, toks[i+1].Range.Start.Byte)
	}
	if len(edits) == 0 {
		return src
	}
	out := append([]byte(nil), src...)
	for j := len(edits) - 1; j >= 0; j-- {
		at := edits[j]
		if at > 0 && (out[at-1] == ' ' || out[at-1] == '\t') {
			out[at-1] = '='
			continue
		}
		out = append(out[:at], append([]byte{'='}, out[at:]...)...)
	}
	return out
}

// hasQuotedKey reports whether the block body starting at toks (just after
// its opening brace) has an argument whose name is quoted.
func hasQuotedKey(toks hclsyntax.Tokens) bool {
	depth, lineStart := 1, true
	for _, t := range toks {
		switch t.Type {
		case hclsyntax.TokenOBrace:
			depth++
		case hclsyntax.TokenCBrace:
			depth--
			if depth == 0 {
				return false
			}
		case hclsyntax.TokenOQuote:
			if depth == 1 && lineStart {
				return true
			}
		}
		lineStart = t.Type == hclsyntax.TokenNewline
	}
	return false
}
