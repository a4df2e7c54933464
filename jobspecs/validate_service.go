package jobspecs

import (
	"fmt"
	"maps"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/meshlet/meshlet/internal/lazyre"
	"github.com/meshlet/meshlet/structs"
)

// connectNameRE is RFC 1123's DNS label, lowercase, as Nomad requires for
// connect service names.
var connectNameRE = lazyre.New(`^[a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?$`)

// checkNetworks validates the group's network blocks and returns its port
// labels.
func checkNetworks(tg *structs.TaskGroup, p path, report reporter) []string {
	if len(tg.Networks) > 1 {
		report(SeverityError, p.item("network", 1, ""), "Too many network blocks",
			fmt.Sprintf("Group %q has %d network blocks; a group may have at most one.", tg.Name, len(tg.Networks)))
	}
	var labels []string
	for i, n := range tg.Networks {
		if n == nil {
			continue
		}
		np := p.item("network", i, "")
		if !validNetworkMode(n.Mode) {
			report(SeverityError, np.attr("mode"), "Invalid network mode",
				fmt.Sprintf("Network mode %q is not valid; use \"host\", \"bridge\", \"none\" or \"cni/<name>\".", n.Mode))
		} else {
			checkCNIName(n.Mode, np.attr("mode"), report)
		}
		kinds := []struct {
			kind  string
			ports []structs.Port
		}{{"reserved_port", n.ReservedPorts}, {"dynamic_port", n.DynamicPorts}}
		for _, k := range kinds {
			for j, port := range k.ports {
				pp := np.item(k.kind, j, port.Label)
				checkPort(port, pp, report)
				if k.kind == "reserved_port" && port.Value == 0 {
					report(SeverityError, pp.attr("static"), "Invalid port", fmt.Sprintf(
						"Port %q: static = 0 is not a port; omit static for a dynamic port.", port.Label))
				}
				if port.Label != "" && slices.Contains(labels, port.Label) {
					report(SeverityError, pp, "Duplicate port label",
						fmt.Sprintf("Port label %q is used more than once in group %q; port labels must be unique within a group.", port.Label, tg.Name))
				}
				labels = append(labels, port.Label)
			}
		}
	}
	return labels
}

func validNetworkMode(mode string) bool {
	switch mode {
	case "", structs.NetworkModeHost, structs.NetworkModeBridge, structs.NetworkModeNone:
		return true
	}
	return strings.HasPrefix(mode, structs.NetworkModeCNIPrefix) && len(mode) > len(structs.NetworkModeCNIPrefix)
}

func checkPort(port structs.Port, p path, report reporter) {
	if port.Label == "" {
		report(SeverityError, p, "Missing port label", `Every port needs a label: port "http" { ... }.`)
	} else {
		checkName("Port label", port.Label, p, report)
	}
	if port.Value < 0 || port.Value > 65535 {
		report(SeverityError, p.attr("static"), "Invalid port",
			fmt.Sprintf("Port %q: static %d is out of range 0-65535.", port.Label, port.Value))
	}
	if port.To < -1 || port.To > 65535 {
		report(SeverityError, p.attr("to"), "Invalid port",
			fmt.Sprintf("Port %q: to %d is out of range 0-65535 (-1 means the same as the host port).", port.Label, port.To))
	}
}

// portRef reports whether ref is a port number or one of labels.
func portRef(ref string, labels []string) bool {
	if n, err := strconv.Atoi(ref); err == nil {
		return n >= 1 && n <= 65535
	}
	return slices.Contains(labels, ref) || strings.Contains(ref, "${")
}

func checkService(s *structs.Service, p path, tg *structs.TaskGroup, labels []string, report reporter) {
	if s == nil {
		report(SeverityError, p, "Missing service", "The service is null.")
		return
	}
	checkNameLen("Service name", s.Name, 0, p.attr("name"), report)
	if s.PortLabel != "" && !portRef(s.PortLabel, labels) {
		report(SeverityError, p.attr("port"), "Unknown service port", fmt.Sprintf(
			"Service %q port %q is neither a port label of group %q (%s) nor a port number 1-65535.",
			s.Name, s.PortLabel, tg.Name, labelList(labels)))
	}
	switch s.AddressMode {
	case "", "auto", "host", "driver", "alloc":
	default:
		report(SeverityError, p.attr("address_mode"), "Invalid address_mode",
			fmt.Sprintf("address_mode %q is not valid; use \"auto\", \"host\", \"driver\" or \"alloc\".", s.AddressMode))
	}
	switch s.Provider {
	case "", "consul", "nomad":
	default:
		report(SeverityError, p.attr("provider"), "Invalid provider",
			fmt.Sprintf("provider %q is not valid; use \"consul\" or \"nomad\".", s.Provider))
	}
	// A service-level check_restart is copied into each check: report the
	// problems of equal copies once.
	var restarts []structs.CheckRestart
	for i := range s.Checks {
		c := &s.Checks[i]
		cp := p.item("check", i, c.Name)
		checkCheck(c, cp, s, labels, report)
		if cr := c.CheckRestart; cr != nil && !slices.ContainsFunc(restarts, sameRestart(*cr)) {
			restarts = append(restarts, *cr)
			checkCheckRestart(cr, cp.sub("check_restart"), report)
		}
	}
	if slices.Contains(tg.Services, s) {
		checkCheckTasks(s, p, tg, report)
	}
	if s.Connect != nil {
		checkConnect(s, p, report)
		if s.Connect.HasSidecar() && strings.ToLower(tg.Name) != tg.Name {
			report(SeverityError, p, "Invalid connect group name", fmt.Sprintf(
				"Consul Connect group %q with sidecar may not contain uppercase letters.", tg.Name))
		}
	}
}

func labelList(labels []string) string {
	if len(labels) == 0 {
		return "it has no port labels"
	}
	return "labels: " + strings.Join(labels, ", ")
}

// checkCheck applies Nomad's check rules (structs.ServiceCheck.validateCommon
// and validateConsul) plus the per-type field rules of meshlet's runner.
func checkCheck(c *structs.ServiceCheck, p path, s *structs.Service, labels []string, report reporter) {
	typeOK := checkCheckType(c, p, report)
	checkCheckTiming(c, p, report)
	if c.PortLabel != "" && !portRef(c.PortLabel, labels) {
		report(SeverityError, p.attr("port"), "Unknown check port",
			fmt.Sprintf("Check port %q is neither a port label of the group (%s) nor a port number 1-65535.", c.PortLabel, labelList(labels)))
	}
	switch c.AddressMode {
	case "", "host", "driver", "alloc":
	default:
		report(SeverityError, p.attr("address_mode"), "Invalid address_mode",
			fmt.Sprintf("Check address_mode %q is not valid; use \"host\", \"driver\" or \"alloc\".", c.AddressMode))
	}
	if c.Expose {
		if c.Type != "http" && c.Type != "grpc" {
			report(SeverityError, p.attr("expose"), "Invalid exposed check",
				fmt.Sprintf("expose may only be set on HTTP or gRPC checks, not %q.", c.Type))
		}
		if !s.Connect.HasSidecar() {
			report(SeverityError, p.attr("expose"), "Invalid exposed check",
				fmt.Sprintf("expose = true needs a connect sidecar_service on service %q.", s.Name))
		}
	}
	if typeOK {
		checkCheckFields(c, p, report)
	}
	checkCheckStatus(c, p, report)
}

// checkCheckType reports an unknown type and the field each type needs;
// it returns whether the type is one meshlet runs.
func checkCheckType(c *structs.ServiceCheck, p path, report reporter) bool {
	switch c.Type {
	case "http":
		if c.Path == "" {
			report(SeverityError, p.attr("path"), "Missing check path", "An http check needs a path, e.g. path = \"/health\".")
		} else if u, err := url.Parse(c.Path); err != nil || u.IsAbs() {
			report(SeverityError, p.attr("path"), "Invalid check path",
				fmt.Sprintf("Check path %q must be a relative URL path such as \"/health\"; the address comes from the service's port.", c.Path))
		}
	case "script":
		if c.Command == "" {
			report(SeverityError, p.attr("command"), "Missing check command", "A script check needs a command.")
		}
	case "tcp", "grpc":
	case "ttl":
		report(SeverityError, p.attr("type"), "Unsupported check type",
			"ttl checks are not run by meshlet (nothing would report their heartbeats); use \"http\", \"tcp\", \"grpc\" or \"script\".")
		return false
	default:
		report(SeverityError, p.attr("type"), "Invalid check type",
			fmt.Sprintf("Check type %q is not valid; use \"http\", \"tcp\", \"grpc\" or \"script\".", c.Type))
		return false
	}
	return true
}

// checkCheckTiming requires interval and timeout of at least 1s, Nomad's
// minimums (an unset one is 0s).
func checkCheckTiming(c *structs.ServiceCheck, p path, report reporter) {
	if c.Interval < time.Second {
		report(SeverityError, p.attr("interval"), "Invalid check interval",
			fmt.Sprintf("Check interval %s must be at least 1s.", c.Interval))
	}
	if c.Timeout < time.Second {
		report(SeverityError, p.attr("timeout"), "Invalid check timeout",
			fmt.Sprintf("Check timeout %s must be at least 1s.", c.Timeout))
	}
}

// checkCheckFields rejects fields the check's type does not use: header,
// body, method, path and protocol are for http checks, grpc_service and
// grpc_use_tls for grpc checks. The values of the http fields must be
// usable in a request.
func checkCheckFields(c *structs.ServiceCheck, p path, report reporter) {
	only := func(typ, attr string, set bool) {
		if set && c.Type != typ {
			report(SeverityError, p.attr(attr), "Invalid check field",
				fmt.Sprintf("%s works with %s checks only, not %q.", attr, typ, c.Type))
		}
	}
	only("http", "header", len(c.Header) > 0)
	only("http", "body", c.Body != "")
	only("http", "method", c.Method != "")
	only("http", "path", c.Path != "")
	only("http", "protocol", c.Protocol != "")
	only("grpc", "grpc_service", c.GRPCService != "")
	only("grpc", "grpc_use_tls", c.GRPCUseTLS)
	if c.Type != "http" {
		return
	}
	switch c.Protocol {
	case "", "http", "https":
	default:
		report(SeverityError, p.attr("protocol"), "Invalid check protocol",
			fmt.Sprintf("Check protocol %q is not valid; use \"http\" or \"https\".", c.Protocol))
	}
	if c.Method != "" && !httpToken(c.Method) {
		report(SeverityError, p.attr("method"), "Invalid check method",
			fmt.Sprintf("Check method %q is not an HTTP method such as \"GET\" or \"POST\".", c.Method))
	}
	for _, name := range slices.Sorted(maps.Keys(c.Header)) {
		if !httpToken(name) {
			report(SeverityError, p.attr("header"), "Invalid check header",
				fmt.Sprintf("Header name %q is not a valid HTTP header name.", name))
		}
		for _, v := range c.Header[name] {
			if strings.ContainsAny(v, "\r\n\x00") {
				report(SeverityError, p.attr("header"), "Invalid check header",
					fmt.Sprintf("Header %q has a value with a line break or NUL.", name))
			}
		}
	}
}

// httpToken reports whether s is an RFC 9110 token, the syntax of HTTP
// methods and header names.
func httpToken(s string) bool {
	return s != "" && !strings.ContainsFunc(s, func(r rune) bool {
		return r <= ' ' || r > '~' || strings.ContainsRune(`"(),/:;<=>?@[\]{}`, r)
	})
}

// checkCheckStatus validates how results turn into a status: the initial
// status, the thresholds, on_update and check_restart.
func checkCheckStatus(c *structs.ServiceCheck, p path, report reporter) {
	switch c.InitialStatus {
	case "", "passing", "warning", "critical":
	default:
		report(SeverityError, p.attr("initial_status"), "Invalid initial_status",
			fmt.Sprintf("initial_status %q is not valid; use \"passing\", \"warning\" or \"critical\".", c.InitialStatus))
	}
	for _, f := range []struct {
		attr string
		v    int
	}{
		{"success_before_passing", c.SuccessBeforePassing},
		{"failures_before_critical", c.FailuresBeforeCritical},
		{"failures_before_warning", c.FailuresBeforeWarning},
	} {
		if f.v < 0 {
			report(SeverityError, p.attr(f.attr), "Invalid "+f.attr,
				fmt.Sprintf("%s %d must not be negative.", f.attr, f.v))
		} else if f.v > 0 && c.Type == "script" {
			report(SeverityError, p.attr(f.attr), "Invalid "+f.attr,
				fmt.Sprintf("%s works with http, tcp and grpc checks only, not %q.", f.attr, c.Type))
		}
	}
	if n := utf8.RuneCountInString(c.Notes); n > maxCheckNotes {
		report(SeverityError, p.attr("notes"), "Invalid check notes",
			fmt.Sprintf("Check notes are %d characters long; the limit is %d.", n, maxCheckNotes))
	}
	switch c.OnUpdate {
	case "", "require_healthy", "ignore_warnings", "ignore":
	default:
		report(SeverityError, p.attr("on_update"), "Invalid on_update",
			fmt.Sprintf("on_update %q is not valid; use \"require_healthy\", \"ignore_warnings\" or \"ignore\".", c.OnUpdate))
	}
	cr := c.CheckRestart
	if cr == nil {
		return
	}
	if c.OnUpdate == "ignore" {
		report(SeverityError, p.attr("on_update"), "Invalid on_update",
			"on_update = \"ignore\" cannot be combined with check_restart: a deployment would count the failing check healthy while check_restart restarts the task.")
	}
	if c.OnUpdate == "ignore_warnings" && !cr.IgnoreWarnings {
		report(SeverityError, p.attr("on_update"), "Invalid on_update",
			"on_update = \"ignore_warnings\" with check_restart needs ignore_warnings = true in check_restart too.")
	}
}

// maxCheckNotes is Nomad's limit on a check's notes.
const maxCheckNotes = 255

// checkCheckRestart validates a check_restart block.
func checkCheckRestart(cr *structs.CheckRestart, p path, report reporter) {
	if cr.Limit < 0 {
		report(SeverityError, p.attr("limit"), "Invalid check_restart limit",
			fmt.Sprintf("check_restart limit %d must not be negative (0 never restarts).", cr.Limit))
	}
	if cr.Grace != nil && *cr.Grace < 0 {
		report(SeverityError, p.attr("grace"), "Invalid check_restart grace",
			fmt.Sprintf("check_restart grace %s must not be negative.", *cr.Grace))
	}
}

// sameRestart matches check_restart values equal to a.
func sameRestart(a structs.CheckRestart) func(structs.CheckRestart) bool {
	return func(b structs.CheckRestart) bool {
		return a.Limit == b.Limit && a.IgnoreWarnings == b.IgnoreWarnings &&
			(a.Grace == nil) == (b.Grace == nil) && (a.Grace == nil || *a.Grace == *b.Grace)
	}
}

// checkCheckTasks applies Nomad's task rules to the checks of a group
// service: only script and grpc checks name a task, and it must be a task
// of the group; a script check needs one, its own or the service's
// (Nomad's validateScriptChecksInGroupServices), since it runs inside it.
func checkCheckTasks(s *structs.Service, p path, tg *structs.TaskGroup, report reporter) {
	isTask := func(name string) bool {
		return slices.ContainsFunc(tg.Tasks, func(t *structs.Task) bool { return t != nil && t.Name == name })
	}
	if s.TaskName != "" && !isTask(s.TaskName) {
		report(SeverityError, p.attr("task"), "Unknown service task",
			fmt.Sprintf("Service task %q is not a task of group %q.", s.TaskName, tg.Name))
	}
	for i := range s.Checks {
		c := &s.Checks[i]
		cp := p.item("check", i, c.Name)
		at := cp.attr("task")
		switch {
		case c.TaskName == "" && c.Type == "script" && s.TaskName == "":
			name := c.Name
			if name == "" {
				name = fmt.Sprintf("service: %q check", s.Name) // Nomad's default check name
			}
			report(SeverityError, cp, "Missing check task",
				fmt.Sprintf("Service [%s]->%s or Check %s must specify task parameter", tg.Name, s.Name, name))
		case c.TaskName == "":
		case c.Type != "script" && c.Type != "grpc":
			report(SeverityError, at, "Invalid check task",
				fmt.Sprintf("task works with script and grpc checks only, not %q.", c.Type))
		case !isTask(c.TaskName):
			report(SeverityError, at, "Unknown check task",
				fmt.Sprintf("Check task %q is not a task of group %q.", c.TaskName, tg.Name))
		}
	}
}

func checkConnect(s *structs.Service, sp path, report reporter) {
	c, p := s.Connect, sp.sub("connect")
	// An empty name is filled by Canonicalize ("<job>-<group>").
	// Job-level references were substituted by Canonicalize; Nomad's
	// rules: a service name valid per RFC 1123, and for connect no
	// uppercase character.
	switch {
	case s.Name == "" || connectNameRE.MatchString(s.Name):
	case strings.ToLower(s.Name) != s.Name && connectNameRE.MatchString(strings.ToLower(s.Name)):
		report(SeverityError, sp.attr("name"), "Invalid connect service name", fmt.Sprintf(
			"Consul Connect service name %q must not contain uppercase characters.", s.Name))
	default:
		report(SeverityError, sp.attr("name"), "Invalid connect service name", fmt.Sprintf(
			"Service name %q must be valid per RFC 1123 and can contain only alphanumeric characters or dashes, at most 63 characters (a connect service name must also be lowercase).", s.Name))
	}
	if c.Native {
		report(SeverityWarning, p.attr("native"), "connect native is not supported by meshlet yet", "")
	}
	if c.Gateway != nil {
		checkGateway(s, c, p, report)
	}
	if ss := c.SidecarService; ss != nil && ss.Proxy != nil {
		pp := p.sub("sidecar_service").sub("proxy")
		for i, u := range ss.Proxy.Upstreams {
			if u == nil {
				continue
			}
			up := pp.item("upstream", i, u.DestinationName)
			name := upstreamName(u, i)
			if u.DestinationName == "" {
				report(SeverityError, up.attr("destination_name"), "Missing upstream destination_name",
					"Every upstreams block needs destination_name.")
			} else {
				checkName("Upstream destination_name", u.DestinationName, up.attr("destination_name"), report)
			}
			if u.LocalBindPort < 1 || u.LocalBindPort > 65535 {
				report(SeverityError, up.attr("local_bind_port"), "Invalid local_bind_port",
					fmt.Sprintf("Upstream %s: local_bind_port %d is out of range 1-65535.", name, u.LocalBindPort))
			}
			checkUpstreamMeshGateway(u, name, up, report)
		}
		if ss.Proxy.Expose != nil {
			for i, xp := range ss.Proxy.Expose.Paths {
				if xp != nil && (xp.LocalPathPort < 1 || xp.LocalPathPort > 65535) {
					report(SeverityError, pp.sub("expose").item("path", i, "").attr("local_path_port"), "Invalid local_path_port",
						fmt.Sprintf("Expose path %q: local_path_port %d is out of range 1-65535.", xp.Path, xp.LocalPathPort))
				}
			}
		}
	}
}

// checkConnectNetwork requires exactly one bridge or cni/* network in a
// group with a connect sidecar.
func checkConnectNetwork(tg *structs.TaskGroup, p path, report reporter) {
	for i, s := range tg.Services {
		if s == nil || !s.Connect.HasSidecar() {
			continue
		}
		found := "no network block"
		if len(tg.Networks) == 1 && tg.Networks[0] != nil {
			mode := tg.Networks[0].Mode
			if mode == structs.NetworkModeBridge || (strings.HasPrefix(mode, structs.NetworkModeCNIPrefix) && validNetworkMode(mode)) {
				return
			}
			found = fmt.Sprintf("network mode %q", cmpOr(mode, structs.NetworkModeHost))
		} else if len(tg.Networks) > 1 {
			found = fmt.Sprintf("%d network blocks", len(tg.Networks))
		}
		report(SeverityError, p.item("service", i, s.Name).sub("connect"), "Connect requires bridge networking", fmt.Sprintf(
			"Service %q has a connect sidecar, so group %q needs exactly one network block with mode \"bridge\" or \"cni/<name>\"; found %s.",
			s.Name, tg.Name, found))
		return
	}
}

// upstreamName quotes an upstream's destination, or names it by position.
func upstreamName(u *structs.ConsulUpstream, i int) string {
	if u.DestinationName == "" {
		return fmt.Sprintf("#%d", i+1)
	}
	return fmt.Sprintf("%q", u.DestinationName)
}

func cmpOr(s, def string) string {
	if s == "" {
		return def
	}
	return s
}

// checkUpstreamPorts requires local_bind_port to be unique in the group
// across all services' upstreams.
func checkUpstreamPorts(tg *structs.TaskGroup, p path, report reporter) {
	type owner struct{ upstream, service string }
	seen := map[int]owner{}
	for i, s := range tg.Services {
		if s == nil || !s.Connect.HasSidecar() || s.Connect.SidecarService.Proxy == nil {
			continue
		}
		pp := p.item("service", i, s.Name).sub("connect").sub("sidecar_service").sub("proxy")
		for j, u := range s.Connect.SidecarService.Proxy.Upstreams {
			if u == nil || u.LocalBindPort == 0 {
				continue
			}
			if prev, dup := seen[u.LocalBindPort]; dup {
				report(SeverityError, pp.item("upstream", j, u.DestinationName).attr("local_bind_port"), "Duplicate local_bind_port", fmt.Sprintf(
					"local_bind_port %d of upstream %s (service %q) is already used by upstream %s (service %q) in group %q; each upstream needs its own port.",
					u.LocalBindPort, upstreamName(u, j), s.Name, prev.upstream, prev.service, tg.Name))
				continue
			}
			seen[u.LocalBindPort] = owner{upstreamName(u, j), s.Name}
		}
	}
}
