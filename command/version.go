package command

import "fmt"

// Version is meshlet's release version.
const Version = "0.1.0"

// GitCommit is set at build time:
// go build -ldflags "-X github.com/meshlet/meshlet/command.GitCommit=$(git rev-parse --short HEAD)".
var GitCommit string

// VersionString is "meshlet v0.1.0", plus " (<commit>)" when embedded.
func VersionString() string {
	if GitCommit != "" {
		return fmt.Sprintf("meshlet v%s (%s)", Version, GitCommit)
	}
	return "meshlet v" + Version
}

func init() {
	register(&command{
		name: "version", args: "", synopsis: "Print meshlet's version",
		help:    "Prints the version, and the git commit when the binary embeds one.",
		example: "$ meshlet version\nmeshlet v0.1.0 (3e387b5)",
		run: func(e *env, c *command, args []string) int {
			fs := newFlags(c)
			if code, ok := e.parse(c, fs, args); !ok {
				return code
			}
			if fs.NArg() != 0 {
				return e.usageError(c, "version takes no arguments")
			}
			fmt.Fprintln(e.stdout, VersionString())
			return exitOK
		},
	})
}
