// CoreDNS for the e2e suite's real node, with only the plugins its Corefile uses
// (cluster.py writes it: kubernetes, cache, errors, health, ready, log, bind). The full
// CoreDNS links every cloud provider's SDK; this keeps the cold build near 100 CPU-seconds.
// dnsserver.Directives (the plugin order) is CoreDNS's own list; a plugin not imported here
// simply cannot be used in a Corefile.
package main

import (
	"github.com/coredns/coredns/coremain"

	_ "github.com/coredns/coredns/plugin/bind"
	_ "github.com/coredns/coredns/plugin/cache"
	_ "github.com/coredns/coredns/plugin/errors"
	_ "github.com/coredns/coredns/plugin/health"
	_ "github.com/coredns/coredns/plugin/kubernetes"
	_ "github.com/coredns/coredns/plugin/log"
	_ "github.com/coredns/coredns/plugin/ready"
)

func main() {
	coremain.Run()
}
