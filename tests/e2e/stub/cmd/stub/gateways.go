package main

// vllm-router and sglang-gateway, stubbed: one process each that lists its workers (statically by
// --prefill/--decode/--worker-urls, or by Kubernetes discovery with label selectors) and routes a
// completion as a prefill then a decode step (P/D) or to one worker (otherwise).

import (
	"fmt"
	"log"
	"math/rand"
	"net"
	"net/http"
	"net/url"
	"os"
	"strconv"
	"strings"
	"time"
)

type worker struct {
	url       string // http://host:port
	pod       string // the Pod's name when discovered
	bootstrap string // SGLang prefill bootstrap port ("" = none)
}

type gateway struct {
	program   string
	style     string // vllm, sglang
	pd        bool
	static    map[string][]worker // kind (prefill, decode, server) -> workers
	kube      *kube
	namespace string
	port      string
	selectors map[string]map[string]string // kind -> labels (discovery)
	rr        roundRobin
	stats     routeStats
	served    counter
	flags     []occurrence
}

// workers of a kind: the static list, or the Ready Pods discovery finds.
func (g *gateway) workers(kind string) ([]worker, error) {
	if g.selectors == nil {
		return g.static[kind], nil
	}
	sel := g.selectors[kind]
	var parts []string
	for k, v := range sel {
		parts = append(parts, k+"="+v)
	}
	pods, err := g.kube.pods(g.namespace, strings.Join(parts, ","))
	if err != nil {
		return nil, err
	}
	var out []worker
	for _, p := range readyMatching(pods, sel) {
		out = append(out, worker{url: "http://" + net.JoinHostPort(p.IP, g.port), pod: p.Name,
			bootstrap: p.Annotations["sglang.ai/bootstrap-port"]})
	}
	return out, nil
}

func (g *gateway) choose(kind string) (worker, error) {
	ws, err := g.workers(kind)
	if err != nil {
		return worker{}, err
	}
	if len(ws) == 0 {
		return worker{}, fmt.Errorf("no %s worker available", kind)
	}
	return ws[g.rr.pick(kind, len(ws))], nil
}

func (g *gateway) route(w http.ResponseWriter, r *http.Request) {
	if !g.pd || !isCompletion(r) {
		kind := "server"
		if g.pd {
			kind = "decode"
		}
		wk, err := g.choose(kind)
		if err != nil {
			g.stats.note("", "", err)
			openAIError(w, http.StatusServiceUnavailable, "RouterError", err.Error())
			return
		}
		pod, err := forward(w, r, wk.url, nil, nil, map[string]string{headerRouterPod: hostname})
		if isCompletion(r) {
			g.stats.note("", pod, err)
		}
		return
	}
	p, err := g.choose("prefill")
	if err == nil {
		var d worker
		d, err = g.choose("decode")
		if err == nil {
			var bootstrap map[string]any
			if g.style == "sglang" {
				host, _, _ := net.SplitHostPort(strings.TrimPrefix(p.url, "http://"))
				port, _ := strconv.Atoi(p.bootstrap)
				bootstrap = map[string]any{"bootstrap_host": host, "bootstrap_port": port,
					"bootstrap_room": rand.Int63()}
			}
			w.Header().Set(headerRouterPod, hostname)
			routePD(w, r, p.url, d.url, g.style, bootstrap, &g.stats)
			return
		}
	}
	g.stats.note("", "", err)
	openAIError(w, http.StatusServiceUnavailable, "RouterError", err.Error())
}

// ready: at least one worker of every kind answers /health.
func (g *gateway) ready() error {
	kinds := []string{"server"}
	if g.pd {
		kinds = []string{"prefill", "decode"}
	}
	client := &http.Client{Timeout: 2 * time.Second}
	for _, kind := range kinds {
		ws, err := g.workers(kind)
		if err != nil {
			return err
		}
		healthy := false
		for _, wk := range ws {
			if resp, err := client.Get(wk.url + "/health"); err == nil {
				resp.Body.Close()
				healthy = healthy || resp.StatusCode == 200
			}
		}
		if !healthy {
			return fmt.Errorf("no healthy %s worker among %d", kind, len(ws))
		}
	}
	return nil
}

func (g *gateway) run(host, port, metricsHost, metricsPort string) {
	role := func() string { return "router" }
	mux := http.NewServeMux()
	mux.HandleFunc("/liveness", func(w http.ResponseWriter, r *http.Request) { w.WriteHeader(200) })
	mux.HandleFunc("/health", func(w http.ResponseWriter, r *http.Request) { w.WriteHeader(200) })
	mux.HandleFunc("/readiness", func(w http.ResponseWriter, r *http.Request) {
		if err := g.ready(); err != nil {
			http.Error(w, err.Error(), http.StatusServiceUnavailable)
			return
		}
		w.WriteHeader(200)
	})
	mux.HandleFunc("/stub/info", func(w http.ResponseWriter, r *http.Request) {
		workers := map[string]any{}
		for _, kind := range []string{"server", "prefill", "decode"} {
			ws, err := g.workers(kind)
			if err != nil {
				workers[kind] = err.Error()
				continue
			}
			var list []string
			for _, wk := range ws {
				list = append(list, strings.TrimSpace(wk.url+" "+wk.pod))
			}
			workers[kind] = list
		}
		writeJSON(w, 200, map[string]any{"program": g.program, "role": "router", "argv": os.Args, "env": environ(),
			"hostname": hostname, "pod_ip": podIP(), "requests_served": g.served.get(), "routes": g.stats.snapshot(),
			"pd": g.pd, "workers": workers, "security": security()})
	})
	mux.HandleFunc("/", g.route)
	metrics := http.NewServeMux()
	metrics.HandleFunc("/metrics", func(w http.ResponseWriter, r *http.Request) {
		s := g.stats.snapshot()
		fmt.Fprintf(w, "# TYPE router_stub_requests_total counter\nrouter_stub_requests_total %v\n", s["routed"])
	})
	p, err := strconv.Atoi(port)
	if err != nil {
		die(2, "%s: error: invalid value '%s' for '--port'", g.program, port)
	}
	log.Printf("%s stub: P/D %v, listening on %s:%d", g.program, g.pd, host, listenPort(p))
	serve(nil, &http.Server{Addr: net.JoinHostPort(listenHost(host), strconv.Itoa(listenPort(p))), Handler: named(role, &g.served, mux)},
		&http.Server{Addr: net.JoinHostPort(listenHost(metricsHost), metricsPort), Handler: metrics})
}

// selector reads `k=v` pairs (the routers' --selector/--prefill-selector/--decode-selector).
func selector(program string, pairs []string) map[string]string {
	out := map[string]string{}
	for _, p := range pairs {
		k, v, ok := strings.Cut(p, "=")
		if !ok {
			die(2, "%s: error: selector %q is not key=value", program, p)
		}
		out[k] = v
	}
	return out
}

// workerURL checks a static worker address the way the router would use it: an http URL whose
// host resolves (the per-instance Service names of a vllm-router pair).
func workerURL(program, raw string) string {
	u, err := url.Parse(raw)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		die(2, "%s: error: invalid worker URL %q", program, raw)
	}
	return strings.TrimSuffix(raw, "/")
}

func runVLLMRouter(args []string) {
	flags := parseLong("vllm-router", args)
	g := &gateway{program: "vllm-router", style: "vllm", static: map[string][]worker{}, flags: flags}
	g.pd = flags.has("--vllm-pd-disaggregation") || flags.has("--pd-disaggregation")
	for _, o := range flags.all("--prefill") {
		if len(o.values) > 2 {
			die(2, "vllm-router: error: --prefill takes URL [BOOTSTRAP_PORT|none], got %q", o.values)
		}
		wk := worker{url: workerURL(g.program, o.values[0])}
		if len(o.values) == 2 && o.values[1] != "none" {
			wk.bootstrap = o.values[1]
		}
		g.static["prefill"] = append(g.static["prefill"], wk)
	}
	for _, u := range flags.values("--decode") {
		g.static["decode"] = append(g.static["decode"], worker{url: workerURL(g.program, u)})
	}
	for _, u := range flags.values("--worker-urls") {
		g.static["server"] = append(g.static["server"], worker{url: workerURL(g.program, u)})
	}
	g.discovery(flags)
	if g.pd && g.selectors == nil && (len(g.static["prefill"]) == 0 || len(g.static["decode"]) == 0) {
		die(2, "vllm-router: error: P/D disaggregation needs --prefill and --decode workers (or service discovery)")
	}
	g.run(flags.last("--host", "127.0.0.1"), flags.last("--port", "30000"), flags.last("--prometheus-host", "127.0.0.1"),
		flags.last("--prometheus-port", "29000"))
}

func (g *gateway) discovery(flags routerArgs) {
	if !flags.has("--service-discovery") {
		return
	}
	g.kube = newKube()
	g.namespace = flags.last("--service-discovery-namespace", "default")
	g.port = flags.last("--service-discovery-port", "8000")
	g.selectors = map[string]map[string]string{"server": selector(g.program, flags.values("--selector"))}
	if g.pd {
		g.selectors["prefill"] = selector(g.program, flags.values("--prefill-selector"))
		g.selectors["decode"] = selector(g.program, flags.values("--decode-selector"))
	}
}

// runSGLangGateway: `python3 -m sglang_router.launch_router ...`, the gateway image's entrypoint,
// an argparse launcher: its option table comes from app/engines/data (sglang-router-*.json).
func runSGLangGateway(args []string) {
	table, err := loadTable("sglang-router-", "", false, false)
	if err != nil {
		die(1, "stub: %v", err)
	}
	program := "python3 -m sglang_router.launch_router"
	parsed, err := table.Parse(args)
	if err != nil {
		die(2, "usage: %s [options]\n%s: error: %v", program, program, err)
	}
	if len(parsed.Positionals) > 0 {
		die(2, "usage: %s [options]\n%s: error: unrecognized arguments: %s", program, program, strings.Join(parsed.Positionals, " "))
	}
	var flags routerArgs
	for _, o := range parsed.Options {
		flags = append(flags, occurrence{o.Flag, o.Values})
	}
	g := &gateway{program: "sglang-gateway", style: "sglang", static: map[string][]worker{}, flags: flags}
	g.pd = flags.has("--pd-disaggregation")
	for _, o := range flags.all("--prefill") {
		wk := worker{url: workerURL(g.program, o.values[0])}
		if len(o.values) > 1 && o.values[1] != "none" {
			wk.bootstrap = o.values[1]
		}
		g.static["prefill"] = append(g.static["prefill"], wk)
	}
	for _, u := range flags.values("--decode") {
		g.static["decode"] = append(g.static["decode"], worker{url: workerURL(g.program, u)})
	}
	for _, u := range flags.values("--worker-urls") {
		g.static["server"] = append(g.static["server"], worker{url: workerURL(g.program, u)})
	}
	g.discovery(flags)
	g.run(flags.last("--host", "127.0.0.1"), flags.last("--port", "30000"), flags.last("--prometheus-host", "0.0.0.0"),
		flags.last("--prometheus-port", "29000"))
}
