package command

import (
	"github.com/meshlet/meshlet/demoapp"
	"github.com/meshlet/meshlet/driver/executor"
)

func init() {
	register(
		&command{
			name: "executor", args: "ARGS...", synopsis: "Internal: supervise one task process", hidden: true,
			help: `Internal entry point the raw_exec and exec drivers start to supervise one task
process (meshlet re-executes itself). Not meant to be run by hand.`,
			example: "$ meshlet executor <arguments chosen by the driver>",
			run: func(e *env, c *command, args []string) int {
				if len(args) == 1 && isHelp(args[0]) {
					e.help(e.stdout, c, nil)
					return exitOK
				}
				return executor.Main(args)
			},
		},
		&command{
			name: "demo-app", args: "NAME [options]", synopsis: "Run a demo program (echo, counting, dashboard, hello...)", hidden: true,
			help: `Runs one of the small programs the example jobs use as tasks: echo (TCP
echo), counting (HTTP counter), dashboard, hello, tcp-client, get. Run
'meshlet demo-app NAME -h' for a program's options.`,
			example: "$ meshlet demo-app counting -listen 127.0.0.1:9001",
			run: func(e *env, c *command, args []string) int {
				if len(args) == 1 && isHelp(args[0]) {
					e.help(e.stdout, c, nil)
					return exitOK
				}
				return demoapp.Main(args, e.stdout, e.stderr)
			},
		},
	)
}
