// Package command is meshlet's command-line interface: `meshlet agent`,
// `meshlet job ...`, `meshlet alloc ...`, `meshlet node status`,
// `meshlet intention ...`, `meshlet acl ...` and `meshlet version`, plus
// the hidden `executor` and `demo-app` entry points that tasks run. It
// talks to the agent with the official github.com/hashicorp/nomad/api
// client (-address, MESHLET_ADDR, NOMAD_ADDR) and to the Consul-shaped
// connect API with github.com/hashicorp/consul/api (-connect-address,
// MESHLET_CONNECT_ADDR, CONSUL_HTTP_ADDR). Both send the ACL token of -token, else
// MESHLET_TOKEN, else NOMAD_TOKEN or CONSUL_HTTP_TOKEN respectively.
//
// Conventions: one flag.FlagSet per command; `-h` prints the usage line, a
// description and an example on stdout and exits 0; errors are one line on
// stderr ("Error: ...") with exit 1; usage errors add the usage line. Exit
// 2 means a deployment failed (`job run`) or an intention check errored.
//
// Concurrency: Run is called once per process (tests call RunIO
// concurrently with distinct streams); commands run on the calling
// goroutine, except the stream pumps of `alloc exec`/`alloc logs`.
package command

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"sort"
	"strings"
	"syscall"
)

// Exit codes.
const (
	exitOK          = 0
	exitError       = 1
	exitDeployFail  = 2
	exitInterrupted = 130
)

// Run runs the CLI with the process's standard streams and returns the exit
// code: main.go is `os.Exit(command.Run(os.Args[1:]))`.
func Run(args []string) int {
	return RunIO(args, os.Stdin, os.Stdout, os.Stderr)
}

// RunIO runs the CLI on the given streams. SIGINT and SIGTERM cancel the
// running command's context.
func RunIO(args []string, stdin io.Reader, stdout, stderr io.Writer) int {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	return runContext(ctx, args, stdin, stdout, stderr)
}

// runContext runs the CLI until ctx ends (tests cancel it instead of
// sending signals).
func runContext(ctx context.Context, args []string, stdin io.Reader, stdout, stderr io.Writer) int {
	e := &env{ctx: ctx, stdin: stdin, stdout: stdout, stderr: stderr}
	return e.dispatch(args)
}

// env is what a running command sees.
type env struct {
	ctx    context.Context
	stdin  io.Reader
	stdout io.Writer
	stderr io.Writer
}

// command is one leaf command.
type command struct {
	name     string // "job run"
	args     string // "[options] FILE"
	synopsis string
	help     string
	example  string
	hidden   bool
	run      func(e *env, c *command, args []string) int
}

// group is a command with subcommands ("job", "alloc" ...).
type group struct {
	name     string
	synopsis string
	example  string
}

var groups = []group{
	{"job", "Run, validate, inspect and stop jobs", "$ meshlet job run countdash.hcl\n  $ meshlet job status countdash"},
	{"alloc", "Inspect allocations, read their logs, run commands in them", "$ meshlet alloc status 8c3a\n  $ meshlet alloc logs -f 8c3a web"},
	{"node", "Inspect client nodes", "$ meshlet node status"},
	{"server", "Inspect and manage the cluster's servers", "$ meshlet server members"},
	{"operator", "Save and restore snapshots of the cluster's state", "$ meshlet operator snapshot save backup.snap\n  $ meshlet operator snapshot restore backup.snap"},
	{"intention", "Manage service-mesh intentions (who may talk to whom)", "$ meshlet intention create -deny web db\n  $ meshlet intention check web db"},
	{"config", "Write, read, list and delete L7 config entries (routers, splitters, resolvers...)", "$ meshlet config write resolver.hcl\n  $ meshlet config list -kind service-resolver"},
	{"connect", "Run sidecar proxies (Envoy bootstraps, the built-in proxy); manage the mesh CA", "$ meshlet connect envoy -sidecar-for <service-id> -bootstrap\n  $ meshlet connect proxy -sidecar-for <service-id>\n  $ meshlet connect ca set-config -config-file ca.json"},
	{"tls", "Create a CA and certificates for mutual TLS between agents", "$ meshlet tls ca create\n  $ meshlet tls cert create -server"},
	{"acl", "Bootstrap ACLs; manage ACL policies and tokens", "$ meshlet acl bootstrap\n  $ meshlet acl policy apply readonly readonly.hcl\n  $ meshlet acl token create -name ci -policy readonly"},
}

// commands is filled by the init functions of the command files.
var commands = map[string]*command{}

func register(cs ...*command) {
	for _, c := range cs {
		commands[c.name] = c
	}
}

func isHelp(arg string) bool {
	return arg == "-h" || arg == "-help" || arg == "--help" || arg == "help"
}

func (e *env) dispatch(args []string) int {
	if len(args) == 0 {
		e.topUsage(e.stderr)
		return exitError
	}
	if isHelp(args[0]) {
		e.topUsage(e.stdout)
		return exitOK
	}
	if len(args) >= 3 {
		if c, ok := commands[strings.Join(args[:3], " ")]; ok {
			return c.run(e, c, args[3:])
		}
	}
	if len(args) >= 2 {
		if c, ok := commands[args[0]+" "+args[1]]; ok {
			return c.run(e, c, args[2:])
		}
	}
	if c, ok := commands[args[0]]; ok {
		return c.run(e, c, args[1:])
	}
	for _, g := range groups {
		if g.name == args[0] {
			return e.runGroup(g, args[1:])
		}
	}
	fmt.Fprintf(e.stderr, "Error: unknown command %q\n\n", args[0])
	e.topUsage(e.stderr)
	return exitError
}

func (e *env) topUsage(w io.Writer) {
	fmt.Fprintf(w, "Usage: meshlet <command> [args]\n\n")
	fmt.Fprintf(w, "  meshlet is a single-node Nomad-style agent with a built-in service mesh.\n\n")
	fmt.Fprintf(w, "Commands:\n")
	var rows []string
	for _, g := range groups {
		rows = append(rows, fmt.Sprintf("  %s\t%s", g.name, g.synopsis))
	}
	for _, c := range commands {
		if !c.hidden && !strings.Contains(c.name, " ") {
			rows = append(rows, fmt.Sprintf("  %s\t%s", c.name, c.synopsis))
		}
	}
	sort.Strings(rows)
	writeTable(w, rows)
	fmt.Fprintf(w, "\nRun 'meshlet <command> -h' for a command's options.\n\nExample:\n  $ meshlet agent -dev\n  $ meshlet job run countdash.hcl\n")
}

// runGroup answers a group named without one of its subcommands (args
// follow the group's name): its usage, on stdout for -h (exit 0), else on
// stderr after an unknown subcommand's error (exit 1).
func (e *env) runGroup(g group, args []string) int {
	switch {
	case len(args) == 0:
		e.groupUsage(e.stderr, g)
		return exitError
	case isHelp(args[0]):
		e.groupUsage(e.stdout, g)
		return exitOK
	}
	fmt.Fprintf(e.stderr, "Error: unknown command \"%s %s\"\n\n", g.name, args[0])
	e.groupUsage(e.stderr, g)
	return exitError
}

func (e *env) groupUsage(w io.Writer, g group) {
	fmt.Fprintf(w, "Usage: meshlet %s <subcommand> [options] [args]\n\n  %s.\n\nSubcommands:\n", g.name, g.synopsis)
	var rows []string
	for _, c := range commands {
		if !c.hidden && strings.HasPrefix(c.name, g.name+" ") {
			rows = append(rows, fmt.Sprintf("  %s\t%s", strings.TrimPrefix(c.name, g.name+" "), c.synopsis))
		}
	}
	sort.Strings(rows)
	writeTable(w, rows)
	fmt.Fprintf(w, "\nExample:\n  %s\n", g.example)
}

// newFlags returns a FlagSet for c that never prints by itself.
func newFlags(c *command) *flag.FlagSet {
	fs := flag.NewFlagSet("meshlet "+c.name, flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	fs.Usage = func() {}
	return fs
}

// parse parses args into fs. It returns ok=false with the exit code when
// the command must stop: after -h (help on stdout, 0) or a flag error
// (one line plus usage on stderr, 1).
func (e *env) parse(c *command, fs *flag.FlagSet, args []string) (int, bool) {
	err := fs.Parse(args)
	switch {
	case err == nil:
		return 0, true
	case errors.Is(err, flag.ErrHelp):
		e.help(e.stdout, c, fs)
		return exitOK, false
	}
	return e.usageError(c, err.Error()), false
}

// usageError prints "Error: msg" and the usage line, and returns 1.
func (e *env) usageError(c *command, msg string) int {
	fmt.Fprintf(e.stderr, "Error: %s\nUsage: meshlet %s %s\nRun 'meshlet %s -h' for help.\n", oneLine(msg), c.name, c.args, c.name)
	return exitError
}

// help prints the command's full help.
func (e *env) help(w io.Writer, c *command, fs *flag.FlagSet) {
	fmt.Fprintf(w, "Usage: meshlet %s %s\n\n", c.name, c.args)
	writeIndented(w, c.help)
	if fs != nil {
		hasFlags := false
		fs.VisitAll(func(*flag.Flag) { hasFlags = true })
		if hasFlags {
			fmt.Fprintf(w, "\nOptions:\n\n")
			fs.SetOutput(w)
			fs.PrintDefaults()
			fs.SetOutput(io.Discard)
		}
	}
	fmt.Fprintf(w, "\nExample:\n\n")
	writeIndented(w, c.example)
}

// writeIndented prints text indented by two spaces (blank lines stay blank).
func writeIndented(w io.Writer, text string) {
	for _, line := range strings.Split(strings.TrimSpace(text), "\n") {
		if line == "" {
			fmt.Fprintln(w)
			continue
		}
		fmt.Fprintf(w, "  %s\n", line)
	}
}

// errorf prints "Error: ..." on one line and returns 1.
func (e *env) errorf(format string, args ...any) int {
	fmt.Fprintf(e.stderr, "Error: %s\n", escapeUnprintable(oneLine(fmt.Sprintf(format, args...))))
	return exitError
}

// oneLine folds a multi-line message into one line.
func oneLine(s string) string {
	lines := strings.FieldsFunc(s, func(r rune) bool { return r == '\n' || r == '\r' })
	for i := range lines {
		lines[i] = strings.TrimSpace(lines[i])
	}
	return strings.Join(lines, "; ")
}
