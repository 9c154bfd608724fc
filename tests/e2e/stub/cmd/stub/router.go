package main

// What the router stubs share: their command lines read strictly from routers.json, the
// Kubernetes Pod discovery some of them do, and the routing job itself (a prefill step on a
// prefiller, then the decode on a decoder, the decoder's answer streamed back unchanged).

import (
	"bytes"
	"crypto/tls"
	"crypto/x509"
	_ "embed"
	"encoding/json"
	"fmt"
	"io"
	"log"
	"net/http"
	"net/url"
	"os"
	"sort"
	"strings"
	"sync"
	"time"
)

//go:embed routers.json
var routersJSON []byte

// longFlags is one router program's options (routers.json).
type longFlags struct {
	Source     string            `json:"source"`
	Style      string            `json:"style"`
	Flags      []string          `json:"flags"`
	NoValue    []string          `json:"no_value"`
	ManyValues []string          `json:"many_values"`
	Short      map[string]string `json:"short"`
}

type occurrence struct {
	flag   string
	values []string
}

// routerArgs is a parsed router command line: every occurrence, in order.
type routerArgs []occurrence

func (a routerArgs) last(flag, fallback string) string {
	for i := len(a) - 1; i >= 0; i-- {
		if a[i].flag == flag {
			if len(a[i].values) == 0 {
				return "true"
			}
			return a[i].values[0]
		}
	}
	return fallback
}

func (a routerArgs) has(flag string) bool {
	v := a.last(flag, "")
	return v != "" && v != "false"
}

func (a routerArgs) all(flag string) []occurrence {
	var out []occurrence
	for _, o := range a {
		if o.flag == flag {
			out = append(out, o)
		}
	}
	return out
}

func (a routerArgs) values(flag string) []string {
	var out []string
	for _, o := range a.all(flag) {
		out = append(out, o.values...)
	}
	return out
}

// parseLong reads a Go (pflag), clap or TCLAP command line: `--name value`, `--name=value`, no
// abbreviations; a no-value option takes a value only as `--name=value`. Anything else is refused
// the way those parsers refuse it, naming the token.
func parseLong(program string, args []string) routerArgs {
	var all map[string]json.RawMessage
	var spec longFlags
	if err := json.Unmarshal(routersJSON, &all); err != nil {
		die(1, "stub: routers.json: %v", err)
	}
	raw, ok := all[program]
	if !ok {
		die(1, "stub: routers.json has no %s", program)
	}
	if err := json.Unmarshal(raw, &spec); err != nil {
		die(1, "stub: routers.json %s: %v", program, err)
	}
	known := map[string]string{}
	for _, f := range spec.Flags {
		known[f] = "one"
	}
	for _, f := range spec.NoValue {
		known[f] = "none"
	}
	for _, f := range spec.ManyValues {
		known[f] = "many"
	}
	var out routerArgs
	for i := 0; i < len(args); i++ {
		token := args[i]
		name, value, hasValue := strings.Cut(token, "=")
		if long, ok := spec.Short[name]; ok {
			name = long
		}
		arity, ok := known[name]
		if !strings.HasPrefix(name, "-") {
			die(2, "%s: error: unexpected argument '%s' found", program, token)
		}
		if !ok {
			die(2, "%s: error: unknown flag: %s (stub of %s)", program, name, spec.Source)
		}
		switch {
		case hasValue:
			out = append(out, occurrence{name, []string{value}})
		case arity == "none":
			out = append(out, occurrence{name, nil})
		case arity == "many":
			var values []string
			for i+1 < len(args) && !strings.HasPrefix(args[i+1], "--") {
				values = append(values, args[i+1])
				i++
			}
			if len(values) == 0 {
				die(2, "%s: error: flag needs an argument: %s", program, name)
			}
			out = append(out, occurrence{name, values})
		default:
			if i+1 >= len(args) {
				die(2, "%s: error: flag needs an argument: %s", program, name)
			}
			out = append(out, occurrence{name, []string{args[i+1]}})
			i++
		}
	}
	return out
}

// --- Kubernetes Pod discovery ---------------------------------------------------------------------

type pod struct {
	Name        string
	IP          string
	Labels      map[string]string
	Annotations map[string]string
	Ready       bool
}

// kube lists Pods with the in-cluster credentials (the router's ServiceAccount, whose RBAC the
// render grants). STUB_KUBE_API points it at another API server (local tests: no token, plain HTTP).
type kube struct {
	base   string
	token  string
	client *http.Client

	mu      sync.Mutex
	cached  map[string][]pod
	fetched map[string]time.Time
	lastErr string
}

func newKube() *kube {
	k := &kube{client: &http.Client{Timeout: 5 * time.Second}, cached: map[string][]pod{}, fetched: map[string]time.Time{}}
	if base := os.Getenv("STUB_KUBE_API"); base != "" {
		k.base = strings.TrimSuffix(base, "/")
		return k
	}
	host, port := os.Getenv("KUBERNETES_SERVICE_HOST"), os.Getenv("KUBERNETES_SERVICE_PORT")
	if host == "" {
		k.lastErr = "not in a cluster: KUBERNETES_SERVICE_HOST is unset (and STUB_KUBE_API too)"
		return k
	}
	k.base = "https://" + joinHostPort(host, port)
	const dir = "/var/run/secrets/kubernetes.io/serviceaccount/"
	token, err := os.ReadFile(dir + "token")
	if err != nil {
		k.lastErr = "no service-account token: " + err.Error()
	}
	k.token = strings.TrimSpace(string(token))
	pool := x509.NewCertPool()
	if ca, err := os.ReadFile(dir + "ca.crt"); err == nil {
		pool.AppendCertsFromPEM(ca)
	}
	k.client.Transport = &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool}}
	return k
}

func joinHostPort(host, port string) string {
	if strings.Contains(host, ":") {
		return "[" + host + "]:" + port
	}
	return host + ":" + port
}

// pods lists the Pods of a namespace matching a label selector (API server syntax, set-based
// included), at most once a second.
func (k *kube) pods(namespace, selector string) ([]pod, error) {
	key := namespace + "|" + selector
	k.mu.Lock()
	if time.Since(k.fetched[key]) < time.Second {
		defer k.mu.Unlock()
		return k.cached[key], nil
	}
	k.mu.Unlock()
	if k.base == "" {
		return nil, fmt.Errorf("%s", k.lastErr)
	}
	u := fmt.Sprintf("%s/api/v1/namespaces/%s/pods?labelSelector=%s", k.base, url.PathEscape(namespace), url.QueryEscape(selector))
	req, _ := http.NewRequest(http.MethodGet, u, nil)
	if k.token != "" {
		req.Header.Set("Authorization", "Bearer "+k.token)
	}
	resp, err := k.client.Do(req)
	if err != nil {
		return nil, k.fail(err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != 200 {
		body, _ := io.ReadAll(io.LimitReader(resp.Body, 512))
		return nil, k.fail(fmt.Errorf("list pods: %s: %s", resp.Status, body))
	}
	var list struct {
		Items []struct {
			Metadata struct {
				Name        string            `json:"name"`
				Labels      map[string]string `json:"labels"`
				Annotations map[string]string `json:"annotations"`
				Deletion    *string           `json:"deletionTimestamp"`
			} `json:"metadata"`
			Status struct {
				PodIP      string `json:"podIP"`
				Conditions []struct {
					Type   string `json:"type"`
					Status string `json:"status"`
				} `json:"conditions"`
			} `json:"status"`
		} `json:"items"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&list); err != nil {
		return nil, k.fail(err)
	}
	var out []pod
	for _, item := range list.Items {
		p := pod{Name: item.Metadata.Name, IP: item.Status.PodIP, Labels: item.Metadata.Labels, Annotations: item.Metadata.Annotations}
		for _, c := range item.Status.Conditions {
			if c.Type == "Ready" && c.Status == "True" {
				p.Ready = item.Metadata.Deletion == nil
			}
		}
		out = append(out, p)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	k.mu.Lock()
	k.cached[key], k.fetched[key], k.lastErr = out, time.Now(), ""
	k.mu.Unlock()
	return out, nil
}

func (k *kube) fail(err error) error {
	k.mu.Lock()
	k.lastErr = err.Error()
	k.mu.Unlock()
	return err
}

// readyMatching: the Ready Pods with an IP carrying every label of `want`.
func readyMatching(pods []pod, want map[string]string) []pod {
	var out []pod
	for _, p := range pods {
		if !p.Ready || p.IP == "" {
			continue
		}
		ok := true
		for k, v := range want {
			if p.Labels[k] != v {
				ok = false
			}
		}
		if ok {
			out = append(out, p)
		}
	}
	return out
}

// roundRobin picks in turn, per pool name.
type roundRobin struct {
	mu   sync.Mutex
	next map[string]int
}

func (r *roundRobin) pick(pool string, n int) int {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.next == nil {
		r.next = map[string]int{}
	}
	i := r.next[pool] % n
	r.next[pool] = i + 1
	return i
}

// --- the routing job ----------------------------------------------------------------------------

var upstream = &http.Client{} // no timeout: answers stream for as long as the engine generates

// routeStats is what a router did, for /stub/info.
type routeStats struct {
	mu     sync.Mutex
	routed int
	failed int
	pairs  map[string]int // "prefill-pod -> decode-pod" (or "-> pod" without a prefill step)
	last   string
}

func (s *routeStats) note(prefill, decode string, err error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.pairs == nil {
		s.pairs = map[string]int{}
	}
	if err != nil {
		s.failed++
		s.last = err.Error()
		return
	}
	s.routed++
	s.pairs[prefill+" -> "+decode]++
}

func (s *routeStats) snapshot() map[string]any {
	s.mu.Lock()
	defer s.mu.Unlock()
	pairs := map[string]int{}
	for k, v := range s.pairs {
		pairs[k] = v
	}
	return map[string]any{"routed": s.routed, "failed": s.failed, "pairs": pairs, "last_error": s.last}
}

// prefillStep sends the prefill-only copy of a request (one token, not streamed) and returns what
// the decoder needs: vLLM's kv_transfer_params and the Pod that ran it.
func prefillStep(r *http.Request, base string, body map[string]any, style string) (map[string]any, string, error) {
	req := map[string]any{}
	for k, v := range body {
		req[k] = v
	}
	req["stream"] = false
	delete(req, "stream_options")
	req["max_tokens"] = 1
	if _, ok := req["max_completion_tokens"]; ok {
		req["max_completion_tokens"] = 1
	}
	if style == "vllm" {
		req["kv_transfer_params"] = map[string]any{"do_remote_decode": true, "do_remote_prefill": false,
			"remote_engine_id": nil, "remote_block_ids": nil, "remote_host": nil, "remote_port": nil}
	}
	raw, _ := json.Marshal(req)
	out, err := http.NewRequestWithContext(r.Context(), http.MethodPost, base+r.URL.Path, bytes.NewReader(raw))
	if err != nil {
		return nil, "", err
	}
	out.Header.Set("Content-Type", "application/json")
	resp, err := upstream.Do(out)
	if err != nil {
		return nil, "", fmt.Errorf("prefill on %s: %w", base, err)
	}
	defer resp.Body.Close()
	var answer map[string]any
	if err := json.NewDecoder(resp.Body).Decode(&answer); err != nil || resp.StatusCode != 200 {
		return nil, "", fmt.Errorf("prefill on %s: %s", base, resp.Status)
	}
	params, _ := answer["kv_transfer_params"].(map[string]any)
	return params, resp.Header.Get(headerPod), nil
}

// forward sends a request (with `body` when not nil) to base+path and copies the answer back,
// streaming it as it comes; extra headers go to the upstream, the answer gets `answer` headers.
func forward(w http.ResponseWriter, r *http.Request, base string, body []byte, extra map[string]string,
	answer map[string]string) (string, error) {
	var reader io.Reader = r.Body
	if body != nil {
		reader = bytes.NewReader(body)
	}
	target := base + r.URL.RequestURI()
	out, err := http.NewRequestWithContext(r.Context(), r.Method, target, reader)
	if err != nil {
		return "", err
	}
	for k, vs := range r.Header {
		for _, v := range vs {
			out.Header.Add(k, v)
		}
	}
	for k, v := range extra {
		out.Header.Set(k, v)
	}
	resp, err := upstream.Do(out)
	if err != nil {
		err = fmt.Errorf("%s: %w", target, err)
		openAIError(w, http.StatusBadGateway, "RouterError", err.Error())
		return "", err
	}
	defer resp.Body.Close()
	for k, vs := range resp.Header {
		if k == headerPod || k == headerRole {
			continue // this hop names itself; the upstream's names are kept below
		}
		for _, v := range vs {
			w.Header().Add(k, v)
		}
	}
	upstreamPod := resp.Header.Get(headerPod)
	for k, v := range answer {
		w.Header().Set(k, v)
	}
	if upstreamPod != "" && w.Header().Get(headerDecodePod) == "" {
		w.Header().Set(headerDecodePod, upstreamPod)
	}
	w.WriteHeader(resp.StatusCode)
	return upstreamPod, copyStream(w, resp.Body)
}

// isCompletion: the requests a P/D router splits into a prefill and a decode step.
func isCompletion(r *http.Request) bool {
	return r.Method == http.MethodPost && (r.URL.Path == "/v1/chat/completions" || r.URL.Path == "/v1/completions")
}

// routePD runs one request as a prefill on `prefill` then a decode on `decode`, answering with the
// decoder's answer. style "vllm" hands kv_transfer_params on (vLLM's connectors); "sglang" names
// the prefiller's bootstrap address in the body (SGLang's disaggregation).
func routePD(w http.ResponseWriter, r *http.Request, prefill, decode, style string, bootstrap map[string]any,
	stats *routeStats) {
	raw, err := io.ReadAll(r.Body)
	var body map[string]any
	if err == nil {
		err = json.Unmarshal(raw, &body)
	}
	if err != nil {
		openAIError(w, http.StatusBadRequest, "BadRequestError", "the body is not a JSON object")
		return
	}
	extra := map[string]string{}
	prefillPod := ""
	if style == "sglang" {
		for k, v := range bootstrap {
			body[k] = v
		}
	}
	params, pod, err := prefillStep(r, prefill, body, style)
	if err != nil {
		stats.note("", "", err)
		log.Printf("%s %s: %v", r.Method, r.URL.Path, err)
		openAIError(w, http.StatusBadGateway, "RouterError", err.Error())
		return
	}
	prefillPod = pod
	if params != nil {
		body["kv_transfer_params"] = params
	}
	extra[headerPrefilledBy] = prefillPod
	decodeBody, _ := json.Marshal(body)
	w.Header().Set(headerPrefillPod, prefillPod)
	decodePod, err := forward(w, r, decode, decodeBody, extra, nil)
	stats.note(prefillPod, decodePod, err)
	log.Printf("%s %s: prefill on %s (%s), decode on %s (%s), err %v", r.Method, r.URL.Path, prefillPod, prefill,
		decodePod, decode, err)
}
