package jobspecs

import (
	"bytes"
	"fmt"
)

// scanSource checks a jobspec against MaxNesting, MaxOperators and
// MaxTokens before HCL sees it: the parser recurses once per nesting level
// and per chained operator (a megabyte of "(" overflows the goroutine
// stack, which no recover catches), and the lexer allocates about 600
// bytes per token. The scan allocates nothing per byte; it follows HCL's
// lexical structure (quoted templates, heredocs, comments, ${ } and %{ }
// sequences) closely enough to bound what the lexer and parser will do,
// and leaves every syntax error to them.
func scanSource(src []byte, filename string, lim Limits) Diagnostics {
	s := scanner{src: src, lim: lim}
	if msg, detail := s.run(); msg != "" {
		line, col := position(src, s.at)
		return Diagnostics{{Severity: SeverityError, Summary: msg, Detail: detail,
			Filename: filename, Line: line, Column: col}}
	}
	return nil
}

type scanner struct {
	src []byte
	lim Limits
	i   int
	// stack holds the open constructs: 'c' a bracket, 't' a ${ or %{
	// sequence, '"' a quoted template, 'h' a heredoc (markers holds its
	// end marker).
	stack      []byte
	markers    [][]byte
	directives int // open %{ if } and %{ for } directives
	ops        int
	tokens     int
	at         int  // start of the last piece consumed
	longNumber bool // a number literal longer than maxNumberText
}

func (s *scanner) run() (summary, detail string) {
	for s.i < len(s.src) {
		s.at = s.i
		mode := byte('c')
		if len(s.stack) > 0 {
			mode = s.stack[len(s.stack)-1]
		}
		switch mode {
		case '"', 'h':
			s.template(mode)
		default:
			s.code()
		}
		switch {
		case len(s.stack)+s.directives > s.lim.MaxNesting:
			return "Jobspec nests too deeply", fmt.Sprintf(
				"Brackets, braces, parentheses, quotes, interpolations and template directives nest more than %d levels deep here.", s.lim.MaxNesting)
		case s.ops > s.lim.MaxOperators:
			return "Jobspec has too many operators", fmt.Sprintf("The jobspec uses more than %d operators.", s.lim.MaxOperators)
		case s.longNumber:
			return "Number too long", fmt.Sprintf("A number literal is written with more than %d characters.", maxNumberText)
		case s.tokens > s.lim.MaxTokens:
			return "Jobspec has too many tokens", fmt.Sprintf("The jobspec has more than %d tokens.", s.lim.MaxTokens)
		}
	}
	return "", ""
}

func (s *scanner) push(mode byte) { s.stack = append(s.stack, mode) }

func (s *scanner) pop() {
	if len(s.stack) > 0 {
		if s.stack[len(s.stack)-1] == 'h' {
			s.markers = s.markers[:len(s.markers)-1]
		}
		s.stack = s.stack[:len(s.stack)-1]
	}
}

func (s *scanner) has(prefix string) bool { return bytes.HasPrefix(s.src[s.i:], []byte(prefix)) }

// code consumes one token (or a comment or space) of an expression.
func (s *scanner) code() {
	c := s.src[s.i]
	switch {
	case c == ' ' || c == '\t' || c == '\r':
		s.i++
		return
	case c == '#' || s.has("//"):
		for s.i < len(s.src) && s.src[s.i] != '\n' {
			s.i++
		}
		return
	case s.has("/*"):
		if end := bytes.Index(s.src[s.i+2:], []byte("*/")); end >= 0 {
			s.i += 2 + end + 2
		} else {
			s.i = len(s.src)
		}
		return
	}
	s.tokens++
	switch {
	case c == '"':
		s.push('"')
	case s.has("<<") && s.heredoc():
		return
	case c == '(' || c == '[' || c == '{':
		s.push('c')
	case c == ')' || c == ']' || c == '}':
		s.pop()
	case s.has("&&") || s.has("||") || s.has("=="):
		s.ops++
		s.i++
	case bytes.IndexByte([]byte("!?+-*/%<>"), c) >= 0:
		s.ops++
	case isIdentByte(c):
		start := s.i
		for s.i < len(s.src) && (isIdentByte(s.src[s.i]) || s.src[s.i] == '-') {
			s.i++
		}
		if c >= '0' && c <= '9' && s.i-start > maxNumberText {
			s.longNumber = true
		}
		return
	}
	s.i++
}

func isIdentByte(c byte) bool {
	return c == '_' || c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c >= 0x80
}

// heredoc opens a heredoc at "<<" if one starts here: <<ID or <<-ID,
// then a newline.
func (s *scanner) heredoc() bool {
	j := s.i + 2
	if j < len(s.src) && s.src[j] == '-' {
		j++
	}
	start := j
	for j < len(s.src) && (isIdentByte(s.src[j]) || s.src[j] == '-') {
		j++
	}
	if j == start || j >= len(s.src) || (s.src[j] != '\n' && !(s.src[j] == '\r' && j+1 < len(s.src) && s.src[j+1] == '\n')) {
		return false
	}
	s.markers = append(s.markers, s.src[start:j])
	s.push('h')
	s.i = bytes.IndexByte(s.src[j:], '\n') + j + 1
	return true
}

// template consumes one piece of a quoted template or heredoc: a literal
// run, an escape, the start of a ${ } or %{ } sequence, or the end.
func (s *scanner) template(mode byte) {
	if mode == 'h' && s.atHeredocEnd() {
		return
	}
	s.tokens++
	switch {
	case mode == '"' && s.src[s.i] == '"':
		s.pop()
		s.i++
	case s.has("$${") || s.has("%%{"):
		s.i += 3
	case s.has("${"):
		s.push('t')
		s.i += 2
	case s.has("%{"):
		s.push('t')
		s.i += 2
		s.directive()
	default:
		s.literal(mode)
	}
}

// literal consumes literal text up to the next sequence, quote or line end.
func (s *scanner) literal(mode byte) {
	for s.i < len(s.src) {
		c := s.src[s.i]
		switch {
		case c == '\\' && mode == '"':
			s.i += 2
			continue
		case c == '"' && mode == '"', (c == '$' || c == '%') && s.i+1 < len(s.src) && s.src[s.i+1] == '{':
			return
		case c == '\n':
			s.i++
			return
		}
		s.i++
	}
}

// atHeredocEnd closes the heredoc when a line holds only its marker.
func (s *scanner) atHeredocEnd() bool {
	if s.i > 0 && s.src[s.i-1] != '\n' {
		return false
	}
	line := s.src[s.i:]
	if nl := bytes.IndexByte(line, '\n'); nl >= 0 {
		line = line[:nl]
	}
	if !bytes.Equal(bytes.TrimSpace(line), s.markers[len(s.markers)-1]) {
		return false
	}
	s.i += len(line)
	s.tokens++
	s.pop()
	return true
}

// directive counts %{ if } and %{ for } as a nesting level until their
// %{ endif } / %{ endfor }.
func (s *scanner) directive() {
	j := s.i
	for j < len(s.src) && (s.src[j] == ' ' || s.src[j] == '\t' || s.src[j] == '~') {
		j++
	}
	k := j
	for k < len(s.src) && isIdentByte(s.src[k]) {
		k++
	}
	switch string(s.src[j:k]) {
	case "if", "for":
		s.directives++
	case "endif", "endfor":
		s.directives = max(0, s.directives-1)
	}
}

// position returns the 1-based line and column of byte offset i.
func position(src []byte, i int) (line, col int) {
	i = min(i, len(src))
	line = bytes.Count(src[:i], []byte("\n")) + 1
	return line, i - (bytes.LastIndexByte(src[:i], '\n') + 1) + 1
}
