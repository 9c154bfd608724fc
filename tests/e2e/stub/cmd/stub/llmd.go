package main

// llm-d-router's three programs, stubbed: Envoy (the router Pod's listener), the Endpoint Picker
// (discovers the engine Pods by label and picks a decoder and a prefiller per request) and the P/D
// routing sidecar in front of each decoder (runs the prefill step on the prefiller the picker
// named, then hands the request to its own decoder).
//
// The real Envoy asks the picker over gRPC ext_proc and routes to the address the picker puts in
// x-gateway-destination-endpoint; the stubs keep that division of labour and those headers, but
// talk plain HTTP between themselves (POST /stub/pick on the picker's ext_proc port): both halves
// are ours, and ext_proc's protobufs are not worth hand-writing. The picker's gRPC health service
// (the kubelet's grpc probes) is real gRPC over h2c.

import (
	"bytes"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"io"
	"log"
	"net"
	"net/http"
	"os"
	"strconv"
	"strings"
	"time"
)

const prefillerHeader = "x-prefiller-host-port" // the picker's choice of prefiller, read by the sidecar

// --- Envoy ------------------------------------------------------------------------------------------

type envoyConfig struct {
	routerPort   int
	pickAddr     string // the ext_proc cluster's address: the picker
	destHeader   string
	readyPort    int
	readyPath    string
	routeTimeout string
}

func readEnvoyConfig(path string) envoyConfig {
	raw, err := os.ReadFile(path)
	if err != nil {
		die(1, "envoy: cannot read --config-path: %v", err)
	}
	// The render writes JSON (which Envoy's YAML loader reads too); the stub reads only JSON.
	var doc struct {
		StaticResources struct {
			Listeners []struct {
				Address struct {
					SocketAddress struct {
						PortValue int `json:"port_value"`
					} `json:"socket_address"`
				} `json:"address"`
				FilterChains []struct {
					Filters []struct {
						TypedConfig struct {
							RouteConfig struct {
								VirtualHosts []struct {
									Routes []struct {
										Route struct {
											Timeout string `json:"timeout"`
										} `json:"route"`
									} `json:"routes"`
								} `json:"virtual_hosts"`
							} `json:"route_config"`
							HTTPFilters []struct {
								Name        string `json:"name"`
								TypedConfig struct {
									GrpcService struct {
										EnvoyGrpc struct {
											ClusterName string `json:"cluster_name"`
										} `json:"envoy_grpc"`
									} `json:"grpc_service"`
									Headers []struct {
										StringMatch struct {
											Exact string `json:"exact"`
										} `json:"string_match"`
									} `json:"headers"`
								} `json:"typed_config"`
							} `json:"http_filters"`
						} `json:"typed_config"`
					} `json:"filters"`
				} `json:"filter_chains"`
			} `json:"listeners"`
			Clusters []struct {
				Name                string `json:"name"`
				OriginalDstLbConfig struct {
					HTTPHeaderName string `json:"http_header_name"`
				} `json:"original_dst_lb_config"`
				LoadAssignment struct {
					Endpoints []struct {
						LbEndpoints []struct {
							Endpoint struct {
								Address struct {
									SocketAddress struct {
										Address   string `json:"address"`
										PortValue int    `json:"port_value"`
									} `json:"socket_address"`
								} `json:"address"`
							} `json:"endpoint"`
						} `json:"lb_endpoints"`
					} `json:"endpoints"`
				} `json:"load_assignment"`
			} `json:"clusters"`
		} `json:"static_resources"`
	}
	if err := json.Unmarshal(raw, &doc); err != nil {
		die(1, "envoy: %s: the stub reads a JSON bootstrap: %v", path, err)
	}
	c := envoyConfig{destHeader: "x-gateway-destination-endpoint"}
	clusters := map[string]string{}
	for _, cl := range doc.StaticResources.Clusters {
		if h := cl.OriginalDstLbConfig.HTTPHeaderName; h != "" {
			c.destHeader = h
		}
		for _, e := range cl.LoadAssignment.Endpoints {
			for _, lb := range e.LbEndpoints {
				a := lb.Endpoint.Address.SocketAddress
				clusters[cl.Name] = net.JoinHostPort(a.Address, strconv.Itoa(a.PortValue))
			}
		}
	}
	for _, l := range doc.StaticResources.Listeners {
		for _, fc := range l.FilterChains {
			for _, f := range fc.Filters {
				for _, hf := range f.TypedConfig.HTTPFilters {
					switch hf.Name {
					case "envoy.filters.http.ext_proc":
						c.routerPort = l.Address.SocketAddress.PortValue
						c.pickAddr = clusters[hf.TypedConfig.GrpcService.EnvoyGrpc.ClusterName]
						for _, vh := range f.TypedConfig.RouteConfig.VirtualHosts {
							for _, rt := range vh.Routes {
								c.routeTimeout = rt.Route.Timeout
							}
						}
					case "envoy.filters.http.health_check":
						c.readyPort = l.Address.SocketAddress.PortValue
						for _, h := range hf.TypedConfig.Headers {
							c.readyPath = h.StringMatch.Exact
						}
					}
				}
			}
		}
	}
	if c.routerPort == 0 || c.pickAddr == "" {
		die(1, "envoy: %s has no listener with an ext_proc filter and its cluster", path)
	}
	return c
}

// pick is the picker's answer for one request.
type pick struct {
	Destination    string `json:"destination"`
	DestinationPod string `json:"destination_pod"`
	Prefill        string `json:"prefill,omitempty"`
	PrefillPod     string `json:"prefill_pod,omitempty"`
	Profile        string `json:"profile"`
	Error          string `json:"error,omitempty"`
}

func runEnvoy(args []string) {
	flags := parseLong("envoy", args)
	path := flags.last("--config-path", "")
	if path == "" {
		die(1, "envoy: --config-path is required by the stub")
	}
	cfg := readEnvoyConfig(path)
	// The picker is in the same Pod: its loopback address is this Pod's (STUB_LISTEN_HOST locally).
	if host, port, err := net.SplitHostPort(cfg.pickAddr); err == nil && host == "127.0.0.1" {
		cfg.pickAddr = net.JoinHostPort(localHost(), port)
	}
	var served counter
	var stats routeStats
	role := func() string { return "router" }
	router := http.NewServeMux()
	router.HandleFunc("/stub/info", func(w http.ResponseWriter, r *http.Request) {
		writeJSON(w, 200, map[string]any{"program": "envoy", "role": "router", "argv": os.Args, "env": environ(),
			"hostname": hostname, "pod_ip": podIP(), "requests_served": served.get(), "routes": stats.snapshot(),
			"picker": cfg.pickAddr, "destination_header": cfg.destHeader, "security": security()})
	})
	router.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		p, err := askPicker(cfg.pickAddr, r, body)
		if err != nil {
			stats.note("", "", err)
			openAIError(w, http.StatusServiceUnavailable, "RouterError", "endpoint picker: "+err.Error())
			return
		}
		extra := map[string]string{cfg.destHeader: p.Destination}
		if p.Prefill != "" {
			extra[prefillerHeader] = p.Prefill
		}
		pod, err := forward(w, r, "http://"+p.Destination, body, extra, map[string]string{headerRouterPod: hostname})
		stats.note(p.PrefillPod, pod, err)
		log.Printf("%s %s -> %s (%s), prefill %s (%s): %v", r.Method, r.URL.Path, p.Destination, p.DestinationPod,
			p.Prefill, p.PrefillPod, err)
	})
	servers := []*http.Server{{Addr: net.JoinHostPort(listenHost(""), strconv.Itoa(listenPort(cfg.routerPort))), Handler: named(role, &served, router)}}
	if cfg.readyPort != 0 {
		ready := http.NewServeMux()
		ready.HandleFunc(cfg.readyPath, func(w http.ResponseWriter, r *http.Request) { w.WriteHeader(200) })
		ready.HandleFunc("/stats/prometheus", func(w http.ResponseWriter, r *http.Request) {
			s := stats.snapshot()
			fmt.Fprintf(w, "# TYPE envoy_stub_routed_total counter\nenvoy_stub_routed_total %v\n", s["routed"])
		})
		servers = append(servers, &http.Server{Addr: net.JoinHostPort(listenHost(""), strconv.Itoa(cfg.readyPort)), Handler: ready})
	}
	log.Printf("envoy stub: routing :%d through the picker at %s", cfg.routerPort, cfg.pickAddr)
	serve(nil, servers...)
}

func askPicker(addr string, r *http.Request, body []byte) (*pick, error) {
	q, _ := json.Marshal(map[string]any{"method": r.Method, "path": r.URL.Path, "body": string(body)})
	resp, err := (&http.Client{Timeout: 10 * time.Second}).Post("http://"+addr+"/stub/pick", "application/json", bytes.NewReader(q))
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	var p pick
	if err := json.NewDecoder(resp.Body).Decode(&p); err != nil {
		return nil, err
	}
	if resp.StatusCode != 200 {
		return nil, fmt.Errorf("%s", p.Error)
	}
	return &p, nil
}

// --- the Endpoint Picker ----------------------------------------------------------------------------

type eppProfile struct {
	name  string
	match map[string]string
}

type epp struct {
	kube       *kube
	namespace  string
	selector   string
	targetPort string
	profiles   []eppProfile
	pd         bool
	threshold  int // prefix-based decider: disaggregate prompts of at least this many tokens
	rr         roundRobin
	stats      routeStats
	served     counter
	listedOnce bool
}

func readEPPConfig(path string) ([]eppProfile, bool, int) {
	raw, err := os.ReadFile(path)
	if err != nil {
		die(1, "epp: --config-file: %v", err)
	}
	var doc struct {
		Plugins []struct {
			Name       string         `json:"name"`
			Type       string         `json:"type"`
			Parameters map[string]any `json:"parameters"`
		} `json:"plugins"`
		SchedulingProfiles []struct {
			Name    string `json:"name"`
			Plugins []struct {
				PluginRef string `json:"pluginRef"`
			} `json:"plugins"`
		} `json:"schedulingProfiles"`
	}
	if err := json.Unmarshal(raw, &doc); err != nil {
		die(1, "epp: %s: the stub reads a JSON EndpointPickerConfig: %v", path, err)
	}
	filters := map[string]map[string]string{}
	pd, threshold := false, 0
	for _, p := range doc.Plugins {
		name := p.Name
		if name == "" {
			name = p.Type
		}
		switch p.Type {
		case "label-selector-filter":
			m := map[string]string{}
			if labels, ok := p.Parameters["matchLabels"].(map[string]any); ok {
				for k, v := range labels {
					m[k] = fmt.Sprint(v)
				}
			}
			filters[name] = m
		case "disagg-profile-handler":
			pd = true
		case "prefix-based-pd-decider":
			if v, ok := p.Parameters["nonCachedTokens"].(float64); ok {
				threshold = int(v)
			}
		}
	}
	var profiles []eppProfile
	for _, sp := range doc.SchedulingProfiles {
		prof := eppProfile{name: sp.Name, match: map[string]string{}}
		for _, ref := range sp.Plugins {
			for k, v := range filters[ref.PluginRef] {
				prof.match[k] = v
			}
		}
		profiles = append(profiles, prof)
	}
	if len(profiles) == 0 {
		die(1, "epp: %s has no schedulingProfiles", path)
	}
	return profiles, pd, threshold
}

func runEPP(args []string) {
	flags := parseLong("epp", args)
	e := &epp{kube: newKube(), selector: flags.last("--endpoint-selector", ""),
		namespace: flags.last("--pool-namespace", os.Getenv("NAMESPACE"))}
	if e.selector == "" {
		die(1, "epp: --endpoint-selector is required (the stub runs without an InferencePool)")
	}
	ports := flags.last("--endpoint-target-ports", "")
	if ports == "" {
		die(1, "epp: --endpoint-target-ports is required with --endpoint-selector")
	}
	e.targetPort = strings.Split(ports, ",")[0]
	if p := os.Getenv("STUB_ENDPOINT_TARGET_PORT"); p != "" {
		e.targetPort = p // local tests whose engines cannot all take the rendered port
	}
	e.profiles, e.pd, e.threshold = readEPPConfig(flags.last("--config-file", ""))
	grpcPort := flags.last("--grpc-port", "9002")
	healthPort := flags.last("--grpc-health-port", "9003")
	metricsPort := flags.last("--metrics-port", "9090")
	if flags.has("--secure-serving") {
		die(1, "epp: the stub serves plain text only; the render sets --secure-serving=false")
	}
	role := func() string { return "endpoint-picker" }
	pickMux := http.NewServeMux()
	pickMux.HandleFunc("/stub/pick", e.pick)
	pickMux.HandleFunc("/stub/info", e.info)
	metrics := http.NewServeMux()
	metrics.HandleFunc("/metrics", func(w http.ResponseWriter, r *http.Request) {
		s := e.stats.snapshot()
		fmt.Fprintf(w, "# TYPE epp_stub_picks_total counter\nepp_stub_picks_total %v\n", s["routed"])
	})
	metrics.HandleFunc("/stub/info", e.info)
	host := listenHost("")
	health := &http.Server{Addr: net.JoinHostPort(host, healthPort), Handler: grpcHealth(func(service string) bool {
		if service == "liveness" {
			return true
		}
		_, err := e.kube.pods(e.namespace, e.selector)
		return err == nil
	})}
	health.Protocols = new(http.Protocols)
	health.Protocols.SetUnencryptedHTTP2(true)
	health.Protocols.SetHTTP1(true)
	log.Printf("epp stub: namespace %s, selector %q, profiles %v, P/D %v", e.namespace, e.selector, e.profiles, e.pd)
	serve(nil, &http.Server{Addr: net.JoinHostPort(host, grpcPort), Handler: named(role, &e.served, pickMux)},
		&http.Server{Addr: net.JoinHostPort(host, metricsPort), Handler: metrics}, health)
}

func (e *epp) pick(w http.ResponseWriter, r *http.Request) {
	var q struct {
		Method, Path, Body string
	}
	_ = json.NewDecoder(r.Body).Decode(&q)
	fail := func(err error) {
		e.stats.note("", "", err)
		writeJSON(w, http.StatusServiceUnavailable, pick{Error: err.Error()})
	}
	pods, err := e.kube.pods(e.namespace, e.selector)
	if err != nil {
		fail(err)
		return
	}
	choose := func(profile eppProfile) (pod, error) {
		ready := readyMatching(pods, profile.match)
		if len(ready) == 0 {
			return pod{}, fmt.Errorf("no Ready endpoint for profile %s (%v) among %d Pods of %q", profile.name,
				profile.match, len(pods), e.selector)
		}
		return ready[e.rr.pick(profile.name, len(ready))], nil
	}
	if !e.pd {
		p, err := choose(e.profiles[0])
		if err != nil {
			fail(err)
			return
		}
		e.stats.note("", p.Name, nil)
		writeJSON(w, 200, pick{Destination: net.JoinHostPort(p.IP, e.targetPort), DestinationPod: p.Name, Profile: e.profiles[0].name})
		return
	}
	var prefill, decode *eppProfile
	for i := range e.profiles {
		switch e.profiles[i].name {
		case "prefill":
			prefill = &e.profiles[i]
		case "decode":
			decode = &e.profiles[i]
		}
	}
	if prefill == nil || decode == nil {
		fail(fmt.Errorf("a disagg-profile-handler needs profiles named prefill and decode"))
		return
	}
	d, err := choose(*decode)
	if err != nil {
		fail(err)
		return
	}
	answer := pick{Destination: net.JoinHostPort(d.IP, e.targetPort), DestinationPod: d.Name, Profile: "decode"}
	// The decider: always (always-disagg-pd-decider), or prompts of at least `threshold` tokens
	// (prefix-based-pd-decider; the stub counts the whole prompt as uncached). Only completions.
	var body map[string]any
	_ = json.Unmarshal([]byte(q.Body), &body)
	tokens := countTokens(body["messages"]) + countTokens(body["prompt"])
	if q.Method == http.MethodPost && strings.HasSuffix(q.Path, "completions") && tokens >= e.threshold {
		p, err := choose(*prefill)
		if err != nil {
			fail(err)
			return
		}
		answer.Prefill, answer.PrefillPod, answer.Profile = net.JoinHostPort(p.IP, e.targetPort), p.Name, "prefill+decode"
	}
	e.stats.note(answer.PrefillPod, d.Name, nil)
	writeJSON(w, 200, answer)
}

func (e *epp) info(w http.ResponseWriter, r *http.Request) {
	pods, err := e.kube.pods(e.namespace, e.selector)
	var names []string
	for _, p := range pods {
		names = append(names, fmt.Sprintf("%s %s ready=%v", p.Name, p.IP, p.Ready))
	}
	errText := ""
	if err != nil {
		errText = err.Error()
	}
	writeJSON(w, 200, map[string]any{"program": "epp", "role": "endpoint-picker", "argv": os.Args, "env": environ(),
		"hostname": hostname, "pod_ip": podIP(), "requests_served": e.served.get(), "picks": e.stats.snapshot(),
		"namespace": e.namespace, "selector": e.selector, "pods": names, "list_error": errText, "pd": e.pd,
		"security": security()})
}

// grpcHealth answers grpc.health.v1.Health/Check (the kubelet's grpc probe) over h2c: SERVING (1)
// or NOT_SERVING (2) for the requested service name.
func grpcHealth(serving func(service string) bool) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/grpc.health.v1.Health/Check" {
			w.Header().Set("Content-Type", "application/grpc")
			w.Header().Set("Trailer", "Grpc-Status")
			w.WriteHeader(200)
			w.Header().Set("Grpc-Status", "12") // UNIMPLEMENTED
			return
		}
		raw, _ := io.ReadAll(r.Body)
		service := ""
		// One length-prefixed message: HealthCheckRequest{ string service = 1; }.
		if len(raw) >= 5 {
			msg := raw[5:]
			if len(msg) >= 2 && msg[0] == 0x0a && int(msg[1]) <= len(msg)-2 {
				service = string(msg[2 : 2+int(msg[1])])
			}
		}
		status := byte(2)
		if serving(service) {
			status = 1
		}
		frame := make([]byte, 5, 7)
		binary.BigEndian.PutUint32(frame[1:], 2)
		frame = append(frame, 0x08, status) // HealthCheckResponse{ status = 1 }
		w.Header().Set("Content-Type", "application/grpc")
		w.Header().Set("Trailer", "Grpc-Status, Grpc-Message")
		w.WriteHeader(200)
		w.Write(frame)
		w.Header().Set("Grpc-Status", "0")
		w.Header().Set("Grpc-Message", "")
	})
}

// --- the P/D routing sidecar --------------------------------------------------------------------------

func runSidecar(args []string) {
	flags := parseLong("pd-sidecar", args)
	port := flags.last("--port", "8000")
	model := flags.last("--model-server-port", flags.last("--vllm-port", "8001"))
	connector := flags.last("--kv-connector", "nixlv2")
	if flags.has("--secure-proxy") {
		die(1, "pd-sidecar: the stub proxies plain HTTP only; the render sets --secure-proxy=false")
	}
	switch connector {
	case "mooncake", "nixlv2", "nixl", "lmcache", "sglang":
	default:
		die(2, "pd-sidecar: unknown --kv-connector %q", connector)
	}
	local := "http://" + net.JoinHostPort(localHost(), model)
	var served counter
	var stats routeStats
	role := func() string { return "routing-proxy" }
	mux := http.NewServeMux()
	// The sidecar's own liveness; everything else not a completion goes to its engine (the
	// decoder's probes on /v1/models reach the engine through it).
	mux.HandleFunc("/health", func(w http.ResponseWriter, r *http.Request) { w.WriteHeader(200) })
	mux.HandleFunc("/stub/proxy-info", func(w http.ResponseWriter, r *http.Request) {
		writeJSON(w, 200, map[string]any{"program": "pd-sidecar", "role": "routing-proxy", "argv": os.Args,
			"env": environ(), "hostname": hostname, "pod_ip": podIP(), "requests_served": served.get(),
			"routes": stats.snapshot(), "model_server": local, "kv_connector": connector, "security": security()})
	})
	mux.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
		prefiller := r.Header.Get(prefillerHeader)
		if prefiller != "" && isCompletion(r) {
			routePD(w, r, "http://"+prefiller, local, "vllm", nil, &stats)
			return
		}
		pod, err := forward(w, r, local, nil, nil, nil)
		if isCompletion(r) {
			stats.note("", pod, err)
		}
	})
	log.Printf("pd-sidecar stub: :%s -> %s (kv connector %s)", port, local, connector)
	p, _ := strconv.Atoi(port)
	serve(nil, &http.Server{Addr: net.JoinHostPort(listenHost(""), strconv.Itoa(listenPort(p))), Handler: named(role, &served, mux)})
}
