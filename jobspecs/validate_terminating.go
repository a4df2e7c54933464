package jobspecs

import (
	"fmt"

	"github.com/meshlet/meshlet/structs"
)

// checkTerminating applies Nomad's rules (ConsulTerminatingConfigEntry and
// ConsulLinkedService Validate) to a terminating block, and refuses what
// meshlet does not run yet (a wildcard service).
func checkTerminating(e *structs.ConsulTerminatingConfigEntry, p path, report reporter) {
	if len(e.Services) == 0 {
		report(SeverityError, p, "Missing terminating service", "Consul Terminating Gateway requires at least one service.")
		return
	}
	names := map[string]bool{}
	for j, s := range e.Services {
		if s == nil {
			continue
		}
		sp := p.item("service", j, s.Name)
		switch {
		case s.Name == "":
			report(SeverityError, sp, "Missing linked service name", "Consul Linked Service requires Name.")
			continue
		case s.Name == "*":
			report(SeverityError, sp.attr("name"), "Unsupported linked service name",
				"A wildcard service name is not supported by meshlet yet; name each service.")
			continue
		case names[s.Name]:
			report(SeverityError, sp.attr("name"), "Duplicate linked service",
				fmt.Sprintf("Service %q is already linked to this gateway.", s.Name))
		default:
			checkName("Linked service name", s.Name, sp.attr("name"), report)
		}
		names[s.Name] = true
		checkLinkedTLS(s, sp, report)
	}
}

// checkLinkedTLS is ConsulLinkedService.Validate's TLS rules.
func checkLinkedTLS(s *structs.ConsulLinkedService, p path, report reporter) {
	ca, cert, key, sni := s.CAFile != "", s.CertFile != "", s.KeyFile != "", s.SNI != ""
	if (cert || key) && !ca {
		at := "cert_file"
		if !cert {
			at = "key_file"
		}
		report(SeverityError, p.attr(at), "Invalid linked service TLS", "Consul Linked Service TLS requires CAFile.")
	}
	if cert != key {
		at := "cert_file"
		if !cert {
			at = "key_file"
		}
		report(SeverityError, p.attr(at), "Invalid linked service TLS", "Consul Linked Service TLS Cert and Key must both be set.")
	}
	if sni && !ca {
		report(SeverityError, p.attr("sni"), "Invalid linked service TLS", "Consul Linked Service TLS SNI requires CAFile.")
	}
}
