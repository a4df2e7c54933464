package command

import (
	"flag"
	"fmt"
	"io"
	"os"

	nomadapi "github.com/hashicorp/nomad/api"
)

func init() {
	register(
		&command{
			name: "acl policy apply", args: "[options] NAME FILE", synopsis: "Create or update an ACL policy",
			help: `Creates the ACL policy NAME, or replaces its rules, from FILE ("-" reads
stdin). The rules are in the policy language: Nomad's namespace, node,
agent and operator rules and Consul's service, service_prefix and mesh
rules. NAME is 1 to 128 letters, digits and dashes. Needs a management
token.`,
			example: "$ meshlet acl policy apply -description \"Read-only\" readonly readonly.hcl\n$ cat readonly.hcl | meshlet acl policy apply readonly -",
			run:     runACLPolicyApply,
		},
		&command{
			name: "acl policy list", args: "[options]", synopsis: "List ACL policies",
			help:    "Lists the ACL policies with their descriptions.",
			example: "$ meshlet acl policy list\n$ meshlet acl policy list -json",
			run:     runACLPolicyList,
		},
		&command{
			name: "acl policy info", args: "[options] NAME", synopsis: "Show an ACL policy and its rules",
			help:    "Shows the ACL policy NAME: its description, indexes and rules.",
			example: "$ meshlet acl policy info readonly",
			run:     runACLPolicyInfo,
		},
		&command{
			name: "acl policy delete", args: "[options] NAME", synopsis: "Delete an ACL policy",
			help: `Deletes the ACL policy NAME. Tokens that name it keep the name but no
longer get its rules. Needs a management token.`,
			example: "$ meshlet acl policy delete readonly",
			run:     runACLPolicyDelete,
		},
	)
}

// policyArg checks that the command got the policy NAME and extra more
// arguments, and returns NAME or a usage message (want: the arguments).
func policyArg(fs *flag.FlagSet, extra int, want string) (string, string) {
	if fs.NArg() != 1+extra {
		return "", "expected " + want
	}
	if !aclNameRE.MatchString(fs.Arg(0)) {
		return "", fmt.Sprintf("invalid policy name %q: want 1 to 128 letters, digits and dashes", fs.Arg(0))
	}
	return fs.Arg(0), ""
}

func runACLPolicyApply(e *env, c *command, args []string) int {
	fs := newFlags(c)
	t := addressFlag(fs)
	description := fs.String("description", "", "the policy's `DESCRIPTION`")
	if code, ok := e.parse(c, fs, args); !ok {
		return code
	}
	name, msg := policyArg(fs, 1, "two arguments: the policy NAME and its rules FILE")
	if msg != "" {
		return e.usageError(c, msg)
	}
	if fs.Arg(1) == "" {
		return e.usageError(c, "expected two arguments: the policy NAME and its rules FILE")
	}
	rules, err := readInputFile(e.stdin, fs.Arg(1), "policy file")
	if err != nil {
		return e.errorf("%v", err)
	}
	client, code, ok := e.aclClient(t)
	if !ok {
		return code
	}
	p := &nomadapi.ACLPolicy{Name: name, Description: *description, Rules: string(rules)}
	if _, err := client.ACLPolicies().Upsert(p, e.writeOpts()); err != nil {
		return e.errorf("failed to write ACL policy %q: %s", name, t.describeACL(err))
	}
	fmt.Fprintf(e.stdout, "Successfully wrote %q ACL policy!\n", name)
	return exitOK
}

// readInputFile reads what (a policy file, a secret file) from path, or
// from stdin for "-".
func readInputFile(stdin io.Reader, path, what string) ([]byte, error) {
	r := stdin
	if path != "-" {
		f, err := os.Open(path)
		if err != nil {
			return nil, fmt.Errorf("failed to read the %s: %w", what, err)
		}
		defer f.Close()
		r = f
	}
	b, err := io.ReadAll(io.LimitReader(r, maxPolicyFile+1))
	switch {
	case err != nil:
		return nil, fmt.Errorf("failed to read the %s %s: %w", what, path, err)
	case len(b) > maxPolicyFile:
		return nil, fmt.Errorf("the %s %s is larger than %d bytes", what, path, maxPolicyFile)
	}
	return b, nil
}

func runACLPolicyList(e *env, c *command, args []string) int {
	fs := newFlags(c)
	t := addressFlag(fs)
	asJSON := jsonFlag(fs)
	if code, ok := e.parse(c, fs, args); !ok {
		return code
	}
	if fs.NArg() != 0 {
		return e.usageError(c, "acl policy list takes no arguments")
	}
	client, code, ok := e.aclClient(t)
	if !ok {
		return code
	}
	policies, _, err := client.ACLPolicies().List(e.queryOpts())
	if err != nil {
		return e.errorf("failed to list ACL policies: %s", t.describeACL(err))
	}
	if *asJSON {
		return e.writeJSON(policies)
	}
	if len(policies) == 0 {
		fmt.Fprintln(e.stdout, "No policies found")
		return exitOK
	}
	rows := []string{row("Name", "Description")}
	for _, p := range policies {
		rows = append(rows, row(p.Name, p.Description))
	}
	writeTable(e.stdout, rows)
	return exitOK
}

func runACLPolicyInfo(e *env, c *command, args []string) int {
	fs := newFlags(c)
	t := addressFlag(fs)
	asJSON := jsonFlag(fs)
	if code, ok := e.parse(c, fs, args); !ok {
		return code
	}
	name, msg := policyArg(fs, 0, "one argument: the policy NAME")
	if msg != "" {
		return e.usageError(c, msg)
	}
	client, code, ok := e.aclClient(t)
	if !ok {
		return code
	}
	p, _, err := client.ACLPolicies().Info(name, e.queryOpts())
	if err != nil {
		return e.errorf("failed to read ACL policy %q: %s", name, t.describeACL(err))
	}
	if *asJSON {
		return e.writeJSON(p)
	}
	// Nomad's formatACLPolicy: its keys have no spaces.
	writeKV(e.stdout, [][2]string{
		{"Name", p.Name},
		{"Description", p.Description},
		{"CreateIndex", fmt.Sprint(p.CreateIndex)},
		{"ModifyIndex", fmt.Sprint(p.ModifyIndex)},
	})
	fmt.Fprint(e.stdout, "\nRules\n\n")
	writeText(e.stdout, p.Rules)
	return exitOK
}

func runACLPolicyDelete(e *env, c *command, args []string) int {
	fs := newFlags(c)
	t := addressFlag(fs)
	if code, ok := e.parse(c, fs, args); !ok {
		return code
	}
	name, msg := policyArg(fs, 0, "one argument: the policy NAME")
	if msg != "" {
		return e.usageError(c, msg)
	}
	client, code, ok := e.aclClient(t)
	if !ok {
		return code
	}
	if _, err := client.ACLPolicies().Delete(name, e.writeOpts()); err != nil {
		return e.errorf("failed to delete ACL policy %q: %s", name, t.describeACL(err))
	}
	fmt.Fprintf(e.stdout, "Successfully deleted %s policy!\n", name)
	return exitOK
}
