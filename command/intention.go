package command

import (
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"slices"
	"strings"

	consulapi "github.com/hashicorp/consul/api"
)

// exitCheckDenied and exitCheckError are `intention check`'s codes, as in
// Consul (0 means allowed).
const (
	exitCheckDenied = 1
	exitCheckError  = 2
)

func init() {
	register(
		&command{
			name: "intention create", args: "[options] SRC DST", synopsis: "Allow or deny traffic from SRC to DST",
			help: `Creates an intention that allows (default) or denies connections from service
SRC to service DST. Either may be "*" (all services). Fails if the intention
exists, unless -replace.` + intentionNameHelp,
			example: "$ meshlet intention create -deny web db\n$ meshlet intention create -allow -replace web db\n$ meshlet intention create default/web default/db",
			run:     runIntentionCreate,
		},
		&command{
			name: "intention delete", args: "[options] SRC DST", synopsis: "Delete the intention from SRC to DST",
			help:    "Deletes the intention from SRC to DST; the default policy applies again." + intentionNameHelp,
			example: "$ meshlet intention delete web db",
			run:     runIntentionDelete,
		},
		&command{
			name: "intention list", args: "[options]", synopsis: "List intentions",
			help:    "Lists every intention with its action and precedence.",
			example: "$ meshlet intention list",
			run:     runIntentionList,
		},
		&command{
			name: "intention check", args: "[options] SRC DST", synopsis: "Check whether SRC may connect to DST",
			help: `Prints "Allowed" or "Denied" for a connection from SRC to DST under the
current intentions and default policy, and what decided. Exit code 0 when
allowed, 1 when denied, 2 on any error (as in Consul). With -method, -path
or -header it checks one HTTP request against L7 intentions (permissions)
and names the permission that matched.` + intentionNameHelp,
			example: "$ meshlet intention check web db\n$ meshlet intention check -method GET -path /admin -header x-team:blue web api",
			run:     runIntentionCheck,
		},
	)
}

// intentionNameHelp says how SRC and DST are spelled, as in Consul's CLI.
const intentionNameHelp = `

SRC and DST are written as in Consul: <service>, <namespace>/<service> or
<partition>/<namespace>/<service>. meshlet has the "default" namespace and
partition only.`

// serviceRef is a parsed SRC or DST: [partition/][namespace/]name.
type serviceRef struct {
	partition, namespace, name string
}

// parseServiceRef splits SRC or DST as Consul's CLI does.
func parseServiceRef(s string) (serviceRef, error) {
	parts := strings.Split(s, "/")
	var ref serviceRef
	switch len(parts) {
	case 1:
		ref.name = parts[0]
	case 2:
		ref.namespace, ref.name = parts[0], parts[1]
	case 3:
		ref.partition, ref.namespace, ref.name = parts[0], parts[1], parts[2]
	default:
		return ref, fmt.Errorf("%q: want <service>, <namespace>/<service> or <partition>/<namespace>/<service>", s)
	}
	if slices.Contains(parts, "") {
		return ref, fmt.Errorf("%q: empty partition, namespace or service name", s)
	}
	return ref, nil
}

// intentionCall is a parsed intention command: client, address, SRC, DST.
type intentionCall struct {
	client   *consulapi.Client
	addr     string
	src, dst string
	// srcRef and dstRef are SRC and DST split into partition, namespace
	// and name (the exact-match API takes SRC and DST as written).
	srcRef, dstRef serviceRef
}

// intentionArgs parses the common flags and SRC DST.
func (e *env) intentionArgs(c *command, args []string, extra func(fs *flag.FlagSet)) (*intentionCall, int, bool) {
	fs := newFlags(c)
	addr := connectAddressFlag(fs)
	if extra != nil {
		extra(fs)
	}
	if code, ok := e.parse(c, fs, args); !ok {
		return nil, code, false
	}
	if fs.NArg() != 2 {
		return nil, e.usageError(c, "expected two arguments: SRC DST"), false
	}
	src, err := parseServiceRef(fs.Arg(0))
	if err != nil {
		return nil, e.usageError(c, "invalid SRC "+err.Error()), false
	}
	dst, err := parseServiceRef(fs.Arg(1))
	if err != nil {
		return nil, e.usageError(c, "invalid DST "+err.Error()), false
	}
	client, err := consulClient(addr)
	if err != nil {
		return nil, e.errorf("%v", err), false
	}
	return &intentionCall{client: client, addr: addr.Addr, src: fs.Arg(0), dst: fs.Arg(1), srcRef: src, dstRef: dst}, 0, true
}

func runIntentionCreate(e *env, c *command, args []string) int {
	var allow, deny, replace *bool
	ic, code, ok := e.intentionArgs(c, args, func(fs *flag.FlagSet) {
		allow = fs.Bool("allow", false, "allow the connections (the default)")
		deny = fs.Bool("deny", false, "deny the connections")
		replace = fs.Bool("replace", false, "replace an existing intention")
	})
	if !ok {
		return code
	}
	if *allow && *deny {
		return e.usageError(c, "-allow and -deny are mutually exclusive")
	}
	action := consulapi.IntentionActionAllow
	if *deny {
		action = consulapi.IntentionActionDeny
	}
	existing, _, err := ic.client.Connect().IntentionGetExact(ic.src, ic.dst, nil)
	if err != nil {
		return e.errorf("failed to look up intention %s => %s: %s", ic.src, ic.dst, describeConsul(err, ic.addr))
	}
	if existing != nil && !*replace {
		return e.errorf("intention %s => %s already exists; use -replace", ic.src, ic.dst)
	}
	ixn := &consulapi.Intention{
		SourcePartition: ic.srcRef.partition, SourceNS: ic.srcRef.namespace, SourceName: ic.srcRef.name,
		DestinationPartition: ic.dstRef.partition, DestinationNS: ic.dstRef.namespace, DestinationName: ic.dstRef.name,
		Action: action,
	}
	if _, err := ic.client.Connect().IntentionUpsert(ixn, nil); err != nil {
		return e.errorf("failed to create intention %s => %s: %s", ic.src, ic.dst, describeConsul(err, ic.addr))
	}
	verb := "Created"
	if existing != nil {
		verb = "Replaced"
	}
	fmt.Fprintf(e.stdout, "%s: %s => %s (%s)\n", verb, ic.src, ic.dst, action)
	return exitOK
}

func runIntentionDelete(e *env, c *command, args []string) int {
	ic, code, ok := e.intentionArgs(c, args, nil)
	if !ok {
		return code
	}
	existing, _, err := ic.client.Connect().IntentionGetExact(ic.src, ic.dst, nil)
	if err != nil {
		return e.errorf("failed to look up intention %s => %s: %s", ic.src, ic.dst, describeConsul(err, ic.addr))
	}
	if existing == nil {
		return e.errorf("intention %s => %s not found", ic.src, ic.dst)
	}
	if _, err := ic.client.Connect().IntentionDeleteExact(ic.src, ic.dst, nil); err != nil {
		return e.errorf("failed to delete intention %s => %s: %s", ic.src, ic.dst, describeConsul(err, ic.addr))
	}
	fmt.Fprintln(e.stdout, "Intention deleted.")
	return exitOK
}

func runIntentionList(e *env, c *command, args []string) int {
	fs := newFlags(c)
	addr := connectAddressFlag(fs)
	if code, ok := e.parse(c, fs, args); !ok {
		return code
	}
	if fs.NArg() != 0 {
		return e.usageError(c, "intention list takes no arguments")
	}
	client, err := consulClient(addr)
	if err != nil {
		return e.errorf("%v", err)
	}
	ixns, _, err := client.Connect().Intentions(nil)
	if err != nil {
		return e.errorf("failed to list intentions: %s", describeConsul(err, addr.Addr))
	}
	if len(ixns) == 0 {
		fmt.Fprintln(e.stdout, "No intentions found.")
		return exitOK
	}
	rows := []string{row("Source", "Action", "Destination", "Precedence")}
	for _, ixn := range ixns {
		action := string(ixn.Action)
		if len(ixn.Permissions) > 0 {
			action = fmt.Sprintf("L7 (%d permissions)", len(ixn.Permissions))
		}
		rows = append(rows, row(qualified(ixn.SourceNS, ixn.SourceName), action,
			qualified(ixn.DestinationNS, ixn.DestinationName), ixn.Precedence))
	}
	writeTable(e.stdout, rows)
	return exitOK
}

func runIntentionCheck(e *env, c *command, args []string) int {
	fs := newFlags(c)
	addr := connectAddressFlag(fs)
	var headers stringList
	method := fs.String("method", "", "check an HTTP request with this `METHOD` against L7 intentions")
	path := fs.String("path", "", "check an HTTP request for this `PATH` against L7 intentions")
	fs.Var(&headers, "header", "an HTTP request header, `Name:Value` (repeatable)")
	if code, ok := e.parse(c, fs, args); !ok {
		if code == exitOK {
			return exitOK
		}
		return exitCheckError
	}
	if fs.NArg() != 2 {
		e.usageError(c, "expected two arguments: SRC DST")
		return exitCheckError
	}
	for _, arg := range fs.Args() {
		if _, err := parseServiceRef(arg); err != nil {
			e.usageError(c, "invalid service "+err.Error())
			return exitCheckError
		}
	}
	q := url.Values{"source": {fs.Arg(0)}, "destination": {fs.Arg(1)}}
	if *method != "" {
		q.Set("method", *method)
	}
	if *path != "" {
		q.Set("path", *path)
	}
	for _, h := range headers {
		q.Add("header", h)
	}
	out, err := intentionCheckHTTP(addr, q)
	if err != nil {
		e.errorf("failed to check intention %s => %s: %s", fs.Arg(0), fs.Arg(1), describeConsul(err, addr.Addr))
		return exitCheckError
	}
	verdict := "Allowed"
	if !out.Allowed {
		verdict = "Denied"
	}
	if isHTTP := *method != "" || *path != "" || len(headers) > 0; isHTTP && out.Reason != "" {
		fmt.Fprintf(e.stdout, "%s: %s\n", verdict, escapeUnprintable(out.Reason))
	} else {
		fmt.Fprintln(e.stdout, verdict)
	}
	if !out.Allowed {
		return exitCheckDenied
	}
	return exitOK
}

// intentionCheckResult is the check endpoint's answer (Consul's Allowed
// plus meshlet's Reason).
type intentionCheckResult struct {
	Allowed bool
	Reason  string
}

// intentionCheckHTTP asks /v1/connect/intentions/check with q (consul/api's
// IntentionCheck cannot send the request's method, path and headers).
func intentionCheckHTTP(t *apiTarget, q url.Values) (intentionCheckResult, error) {
	var out intentionCheckResult
	client, err := t.httpClient()
	if err != nil {
		return out, err
	}
	resp, err := client.Get(strings.TrimRight(t.URL(), "/") + "/v1/connect/intentions/check?" + q.Encode())
	if err != nil {
		return out, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		b, _ := io.ReadAll(io.LimitReader(resp.Body, 4096))
		return out, consulapi.StatusError{Code: resp.StatusCode, Body: strings.TrimSpace(string(b))}
	}
	if err := json.NewDecoder(resp.Body).Decode(&out); err != nil {
		return out, fmt.Errorf("%s: unreadable answer: %w", t.Addr, err)
	}
	return out, nil
}

// qualified spells a service with its namespace unless that is the
// default one.
func qualified(ns, name string) string {
	if ns == "" || ns == "default" {
		return name
	}
	return ns + "/" + name
}

// describeConsul renders a consul/api error on one line, with a hint when
// the connect API is unreachable.
func describeConsul(err error, addr string) string {
	if hint := tlsHint(err, addr, "MESHLET_CONNECT_ADDR"); hint != "" {
		return hint
	}
	var se consulapi.StatusError
	switch {
	case errors.As(err, &se):
		return fmt.Sprintf("%s (HTTP %d)", oneLine(se.Body), se.Code)
	case unreachable(err):
		return fmt.Sprintf("cannot reach the connect API at %s (is the agent running? set MESHLET_CONNECT_ADDR or -connect-address): %s",
			addr, rootCause(err))
	}
	return oneLine(err.Error())
}
