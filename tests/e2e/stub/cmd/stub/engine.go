package main

// The stub engine: reads the rendered command line with the real engine's option table, serves the
// OpenAI API, /health, /metrics with the engine's own metric names, and /stub/info; a size-N
// replica's followers register with their leader, which is healthy only once all have.
//
// Knobs (environment, so the rendered command line stays exactly the real one):
//
//	STUB_LOAD_SECONDS     /health (and /v1/models) answer 503 until this long after start (default 0)
//	STUB_TOKEN_DELAY_MS   pause between generated tokens (default 0)
//	STUB_MAX_TOKENS_OUT   tokens generated at most per request (default 16; max_tokens lowers it)
//	STUB_MAX_RUNNING      requests run at once, the rest wait (num_requests_waiting); 0: no limit
//	STUB_LISTEN_HOST      listen on this address instead of the rendered --host: the "Pod IP" of a
//	                      local test, where each stub Pod gets its own 127.0.0.x
//	STUB_LISTEN_PORT      listen here instead of the rendered --port (local tests)
//	STUB_LEADER_PORT      a follower dials its leader here instead of the rendered --port (local tests)
//	STUB_DRAIN_SECONDS    on SIGTERM, how long in-flight requests may finish (default 20)
//	STUB_EXIT_CODE        exit at once with this code after reading the command line (an engine that
//	                      fails at start: the kubelet restarts it into CrashLoopBackOff); unset: serve

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log"
	"net"
	"net/http"
	"os"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"
)

type engineKind struct {
	name        string // vLLM, SGLang
	program     string // as argparse prints it in its usage line
	tablePrefix string
	tableSkip   string // a table sharing the prefix that is not this engine's (vllm-router-)
	underscores bool
	dotted      bool
	defaultPort int
	defaultHost string // "" binds every address
	ownedBy     string // /v1/models owned_by
}

var (
	engineVLLM = engineKind{name: "vLLM", program: "vllm serve", tablePrefix: "vllm-", tableSkip: "vllm-router-",
		underscores: true, dotted: true, defaultPort: 8000, ownedBy: "vllm"}
	engineSGLang = engineKind{name: "SGLang", program: "python3 -m sglang.launch_server", tablePrefix: "sglang-",
		tableSkip: "sglang-router-", defaultPort: 30000, defaultHost: "127.0.0.1", ownedBy: "sglang"}
)

// engineConfig is what the command line and environment told the engine.
type engineConfig struct {
	kind          engineKind
	parsed        *Parsed
	model         string
	served        []string
	host          string
	port          int    // the rendered --port (or the engine's default)
	listen        int    // where it listens (STUB_LISTEN_PORT may differ)
	role          string // server, prefill, decode
	kvTransfer    map[string]any
	metricsOn     bool
	memberIndex   int
	groupSize     int
	leaderAddress string
	kvCacheClient any
	loadDelay     time.Duration
	tokenDelay    time.Duration
	maxTokensOut  int
	bootstrapPort int
}

func refuse(kind engineKind, format string, a ...any) {
	die(2, "usage: %s [options]\n%s: error: %s", kind.program, kind.program, fmt.Sprintf(format, a...))
}

func readEngineConfig(kind engineKind, args []string) *engineConfig {
	table, err := loadTable(kind.tablePrefix, kind.tableSkip, kind.underscores, kind.dotted)
	if err != nil {
		die(1, "stub: %v", err)
	}
	parsed, err := table.Parse(args)
	if err != nil {
		refuse(kind, "%v", err)
	}
	c := &engineConfig{kind: kind, parsed: parsed, host: kind.defaultHost, port: kind.defaultPort, role: "server",
		memberIndex: 0, groupSize: 1}
	if kind.name == "vLLM" {
		// `vllm serve [model_tag]`: one positional at most; --model also names it.
		if len(parsed.Positionals) > 1 {
			refuse(kind, "unrecognized arguments: %s", strings.Join(parsed.Positionals[1:], " "))
		}
		if len(parsed.Positionals) == 1 {
			c.model = parsed.Positionals[0]
		} else if m, ok := parsed.Last("--model"); ok {
			c.model = m
		} else {
			c.model = "Qwen/Qwen3-0.6B" // vLLM 0.33's default model
		}
		for _, o := range parsed.All("--served-model-name") {
			c.served = append(c.served, o.Values...)
		}
		c.kvTransfer = jsonOption(kind, parsed, "--kv-transfer-config")
		jsonOption(kind, parsed, "--kv-events-config")
		switch c.kvTransfer["kv_role"] {
		case "kv_producer":
			c.role = "prefill"
		case "kv_consumer":
			c.role = "decode"
		}
		c.metricsOn = true // vLLM always serves /metrics
		c.bootstrapPort = envInt("VLLM_MOONCAKE_BOOTSTRAP_PORT", 8998)
	} else {
		if len(parsed.Positionals) > 0 {
			refuse(kind, "unrecognized arguments: %s", strings.Join(parsed.Positionals, " "))
		}
		m, ok := parsed.Last("--model-path")
		if !ok {
			refuse(kind, "the following arguments are required: --model-path/--model")
		}
		c.model = m
		if s, ok := parsed.Last("--served-model-name"); ok {
			c.served = []string{s}
		}
		if mode, ok := parsed.Last("--disaggregation-mode"); ok {
			switch mode {
			case "null":
			case "prefill", "decode":
				c.role = mode
			default:
				refuse(kind, "argument --disaggregation-mode: invalid choice: '%s' (choose from 'null', 'prefill', 'decode')", mode)
			}
		}
		// SGLang adds its Prometheus endpoint only with --enable-metrics (http_server.py).
		_, c.metricsOn = parsed.Last("--enable-metrics")
		c.bootstrapPort = 8998
		if p, ok := parsed.Last("--disaggregation-bootstrap-port"); ok {
			c.bootstrapPort, _ = strconv.Atoi(p)
		}
	}
	if len(c.served) == 0 {
		c.served = []string{c.model}
	}
	if h, ok := c.parsed.Last("--host"); ok {
		c.host = h
	}
	if p, ok := c.parsed.Last("--port"); ok {
		n, err := strconv.Atoi(p)
		if err != nil || n < 1 || n > 65535 {
			refuse(kind, "argument --port: invalid int value: '%s'", p)
		}
		c.port = n
	}
	c.listen = listenPort(c.port)
	c.readReplicaEnv()
	c.readKVCacheClient()
	c.loadDelay = envSeconds("STUB_LOAD_SECONDS", 0)
	c.tokenDelay = time.Duration(envInt("STUB_TOKEN_DELAY_MS", 0)) * time.Millisecond
	c.maxTokensOut = envInt("STUB_MAX_TOKENS_OUT", 16)
	return c
}

// jsonOption: a JSON-valued option (vLLM parses it with json.loads, then applies dotted members).
func jsonOption(kind engineKind, parsed *Parsed, flag string) map[string]any {
	doc := map[string]any{}
	for _, o := range parsed.All(flag) {
		if o.Member != "" {
			var v any
			if json.Unmarshal([]byte(o.Values[0]), &v) != nil {
				v = o.Values[0] // a dotted member's value is JSON when it parses, else a string
			}
			setMember(doc, strings.Split(o.Member, "."), v)
			continue
		}
		if len(o.Values) == 0 {
			continue
		}
		fresh := map[string]any{}
		if err := json.Unmarshal([]byte(o.Values[0]), &fresh); err != nil {
			refuse(kind, "argument %s: Value %s cannot be converted to <function loads>: %v", flag, o.Values[0], err)
		}
		doc = fresh
	}
	return doc
}

func setMember(doc map[string]any, path []string, v any) {
	for _, key := range path[:len(path)-1] {
		next, ok := doc[key].(map[string]any)
		if !ok {
			next = map[string]any{}
			doc[key] = next
		}
		doc = next
	}
	doc[path[len(path)-1]] = v
}

// readReplicaEnv: how the render tells a member of a size-N replica who it is (app/render/pod.py).
func (c *engineConfig) readReplicaEnv() {
	size := os.Getenv("GPUSTACK_REPLICA_SIZE")
	if size == "" {
		return
	}
	n, err := strconv.Atoi(size)
	if err != nil || n < 1 {
		die(1, "stub: GPUSTACK_REPLICA_SIZE=%q is not a positive integer", size)
	}
	c.groupSize = n
	index := os.Getenv("GPUSTACK_MEMBER_INDEX")
	i, err := strconv.Atoi(index)
	if err != nil || i < 0 || i >= n {
		die(1, "stub: GPUSTACK_MEMBER_INDEX=%q is not a member index of a group of %d (is the downward API projected?)", index, n)
	}
	c.memberIndex = i
	c.leaderAddress = os.Getenv("GPUSTACK_REPLICA_LEADER_ADDRESS")
	if n > 1 && c.leaderAddress == "" {
		die(1, "stub: GPUSTACK_REPLICA_SIZE=%d but GPUSTACK_REPLICA_LEADER_ADDRESS is empty", n)
	}
}

// readKVCacheClient: the Mooncake store client's config. vLLM's connector reads the file
// MOONCAKE_CONFIG_PATH names (a downward-API projection of the Pod annotation) and fails without
// it; SGLang reads the MOONCAKE_* environment.
func (c *engineConfig) readKVCacheClient() {
	if path := os.Getenv("MOONCAKE_CONFIG_PATH"); path != "" {
		raw, err := os.ReadFile(path)
		if err != nil {
			die(1, "stub: MOONCAKE_CONFIG_PATH: %v", err)
		}
		var doc map[string]any
		if err := json.Unmarshal(raw, &doc); err != nil {
			die(1, "stub: MOONCAKE_CONFIG_PATH %s is not a JSON object: %v", path, err)
		}
		c.kvCacheClient = map[string]any{"source": path, "config": doc}
		return
	}
	if master := os.Getenv("MOONCAKE_MASTER"); master != "" {
		env := map[string]string{}
		for k, v := range environ() {
			if strings.HasPrefix(k, "MOONCAKE_") {
				env[k] = v
			}
		}
		c.kvCacheClient = map[string]any{"source": "environment", "config": env}
	}
}

// engineState is what the engine has done, for /health, /metrics and /stub/info.
type engineState struct {
	cfg    *engineConfig
	served counter
	slots  chan struct{} // STUB_MAX_RUNNING

	mu           sync.Mutex
	draining     bool
	forcedDown   string // POST /stub/health {"healthy": false, "reason": ...}
	running      int
	waiting      int
	success      int
	promptTokens int
	genTokens    int
	completions  int
	prefillSteps int
	decodeSteps  int
	prefilledBy  map[string]int
	followers    map[int]map[string]any // leader: member index -> what it said
	leader       map[string]any         // follower: the leader connection
	leaderUp     bool
	seq          int
}

func runEngine(kind engineKind, args []string) {
	cfg := readEngineConfig(kind, args)
	if code := os.Getenv("STUB_EXIT_CODE"); code != "" {
		log.Printf("%s stub: exiting with code %s (STUB_EXIT_CODE)", kind.name, code)
		os.Exit(envInt("STUB_EXIT_CODE", 1))
	}
	s := &engineState{cfg: cfg, prefilledBy: map[string]int{}, followers: map[int]map[string]any{},
		leader: map[string]any{}}
	if n := envInt("STUB_MAX_RUNNING", 0); n > 0 {
		s.slots = make(chan struct{}, n)
	}
	log.Printf("%s stub: model %s served as %v, role %s, member %d of %d, listening on %s:%d, load %s",
		kind.name, cfg.model, cfg.served, cfg.role, cfg.memberIndex, cfg.groupSize, cfg.host, cfg.listen, cfg.loadDelay)
	if cfg.groupSize > 1 && cfg.memberIndex > 0 {
		go s.followLeader()
	}
	mux := http.NewServeMux()
	mux.HandleFunc("/health", s.health)
	mux.HandleFunc("/health_generate", s.health)
	mux.HandleFunc("/v1/models", s.models)
	mux.HandleFunc("/v1/chat/completions", s.completion(true))
	mux.HandleFunc("/v1/completions", s.completion(false))
	mux.HandleFunc("/metrics", s.metrics)
	mux.HandleFunc("/stub/info", s.info)
	mux.HandleFunc("/stub/register", s.register)
	mux.HandleFunc("/stub/health", s.setHealth)
	mux.HandleFunc("/stub/exit", exitHandler)
	role := func() string { return cfg.role }
	srv := &http.Server{Addr: net.JoinHostPort(listenHost(cfg.host), strconv.Itoa(cfg.listen)), Handler: named(role, &s.served, mux)}
	serve(func() { s.mu.Lock(); s.draining = true; s.mu.Unlock() }, srv)
}

func (s *engineState) loaded() bool { return time.Since(startedAt) >= s.cfg.loadDelay }

// why is the reason /health is not 200, or "".
func (s *engineState) why() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	switch {
	case s.draining:
		return "shutting down"
	case s.forcedDown != "":
		return s.forcedDown
	case !s.loaded():
		return fmt.Sprintf("loading (%.1fs of %.1fs)", time.Since(startedAt).Seconds(), s.cfg.loadDelay.Seconds())
	case s.cfg.groupSize > 1 && s.cfg.memberIndex == 0 && len(s.followers) < s.cfg.groupSize-1:
		return fmt.Sprintf("waiting for followers: %d of %d registered", len(s.followers), s.cfg.groupSize-1)
	case s.cfg.groupSize > 1 && s.cfg.memberIndex > 0 && !s.leaderUp:
		return "not connected to the leader " + s.cfg.leaderAddress
	}
	return ""
}

func (s *engineState) health(w http.ResponseWriter, r *http.Request) {
	if why := s.why(); why != "" {
		http.Error(w, why, http.StatusServiceUnavailable)
		return
	}
	w.WriteHeader(http.StatusOK)
}

func (s *engineState) setHealth(w http.ResponseWriter, r *http.Request) {
	var body struct {
		Healthy bool   `json:"healthy"`
		Reason  string `json:"reason"`
	}
	if r.Method != http.MethodPost || json.NewDecoder(r.Body).Decode(&body) != nil {
		http.Error(w, `POST {"healthy": bool, "reason": "..."}`, http.StatusBadRequest)
		return
	}
	s.mu.Lock()
	s.forcedDown = ""
	if !body.Healthy {
		s.forcedDown = "made unhealthy by /stub/health: " + body.Reason
	}
	s.mu.Unlock()
	writeJSON(w, 200, map[string]any{"healthy": body.Healthy})
}

func (s *engineState) models(w http.ResponseWriter, r *http.Request) {
	if !s.loaded() {
		http.Error(w, "loading", http.StatusServiceUnavailable)
		return
	}
	var data []map[string]any
	for _, name := range s.cfg.served {
		data = append(data, map[string]any{"id": name, "object": "model", "created": startedAt.Unix(),
			"owned_by": s.cfg.kind.ownedBy, "root": s.cfg.model, "max_model_len": 32768})
	}
	writeJSON(w, 200, map[string]any{"object": "list", "data": data})
}

// register: a follower announces itself to its leader, then keeps doing so (a heartbeat).
func (s *engineState) register(w http.ResponseWriter, r *http.Request) {
	var body map[string]any
	if r.Method != http.MethodPost || json.NewDecoder(r.Body).Decode(&body) != nil {
		http.Error(w, "POST a JSON object", http.StatusBadRequest)
		return
	}
	if s.cfg.groupSize < 2 || s.cfg.memberIndex != 0 {
		http.Error(w, fmt.Sprintf("not a leader (member %d of %d)", s.cfg.memberIndex, s.cfg.groupSize), http.StatusConflict)
		return
	}
	member, _ := body["member"].(float64)
	if int(member) < 1 || int(member) >= s.cfg.groupSize {
		http.Error(w, fmt.Sprintf("member %v is no follower of a group of %d", body["member"], s.cfg.groupSize), http.StatusBadRequest)
		return
	}
	s.mu.Lock()
	old, seen := s.followers[int(member)]
	body["last_seen"] = time.Now().UTC().Format(time.RFC3339Nano)
	body["registered_at"] = body["last_seen"]
	body["remote_addr"] = r.RemoteAddr
	if seen && old["hostname"] == body["hostname"] {
		body["registered_at"] = old["registered_at"]
	} else {
		log.Printf("follower %d registered: %v from %s", int(member), body["hostname"], r.RemoteAddr)
	}
	s.followers[int(member)] = body
	s.mu.Unlock()
	writeJSON(w, 200, map[string]any{"leader": hostname, "leader_ip": podIP()})
}

// followLeader resolves the rendered leader address, registers, and heartbeats, forever.
func (s *engineState) followLeader() {
	port := envInt("STUB_LEADER_PORT", s.cfg.port)
	client := &http.Client{Timeout: 3 * time.Second}
	for {
		ips, err := net.DefaultResolver.LookupHost(context.Background(), s.cfg.leaderAddress)
		state := map[string]any{"address": s.cfg.leaderAddress, "port": port, "resolved": ips,
			"at": time.Now().UTC().Format(time.RFC3339Nano)}
		up := false
		if err != nil {
			state["error"] = err.Error()
		} else {
			body, _ := json.Marshal(map[string]any{"member": s.cfg.memberIndex, "hostname": hostname, "ip": podIP()})
			url := "http://" + net.JoinHostPort(s.cfg.leaderAddress, strconv.Itoa(port)) + "/stub/register"
			resp, err := client.Post(url, "application/json", bytes.NewReader(body))
			if err != nil {
				state["error"] = err.Error()
			} else {
				var answer map[string]any
				_ = json.NewDecoder(resp.Body).Decode(&answer)
				resp.Body.Close()
				if resp.StatusCode == 200 {
					up = true
					state["answer"] = answer
				} else {
					state["error"] = fmt.Sprintf("leader answered %s", resp.Status)
				}
			}
		}
		s.mu.Lock()
		if up && !s.leaderUp {
			log.Printf("registered with leader %s (%v)", s.cfg.leaderAddress, ips)
		} else if !up && (s.leaderUp || s.leader["error"] != state["error"]) {
			log.Printf("leader %s not reachable: %v", s.cfg.leaderAddress, state["error"])
		}
		if up {
			if first, ok := s.leader["connected_since"]; ok && s.leaderUp {
				state["connected_since"] = first
			} else {
				state["connected_since"] = state["at"]
			}
		}
		s.leaderUp, s.leader = up, state
		s.mu.Unlock()
		if up {
			time.Sleep(2 * time.Second)
		} else {
			time.Sleep(500 * time.Millisecond)
		}
	}
}

// --- the OpenAI API -----------------------------------------------------------------------------

var words = strings.Fields("The stub engine answers with a fixed sentence so tests can check every token that passes through .")

func countTokens(v any) int {
	switch x := v.(type) {
	case string:
		return len(strings.Fields(x)) + 1
	case []any:
		n := 0
		for _, e := range x {
			n += countTokens(e)
		}
		return n
	case map[string]any:
		return countTokens(x["content"])
	}
	return 1
}

func (s *engineState) completion(chat bool) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		if r.Method != http.MethodPost {
			openAIError(w, http.StatusMethodNotAllowed, "BadRequestError", "POST only")
			return
		}
		if why := s.why(); why != "" && !strings.HasPrefix(why, "made unhealthy") {
			openAIError(w, http.StatusServiceUnavailable, "ServiceUnavailableError", why)
			return
		}
		var req map[string]any
		if err := json.NewDecoder(r.Body).Decode(&req); err != nil {
			openAIError(w, http.StatusBadRequest, "BadRequestError", "the body is not a JSON object: "+err.Error())
			return
		}
		model, _ := req["model"].(string)
		if model == "" {
			model = s.cfg.served[0]
		} else if !contains(s.cfg.served, model) {
			openAIError(w, http.StatusNotFound, "NotFoundError", fmt.Sprintf("The model `%s` does not exist.", model))
			return
		}
		var prompt any
		if chat {
			prompt = req["messages"]
			if _, ok := prompt.([]any); !ok {
				openAIError(w, http.StatusBadRequest, "BadRequestError", "messages: a list is required")
				return
			}
		} else {
			prompt = req["prompt"]
			if prompt == nil {
				openAIError(w, http.StatusBadRequest, "BadRequestError", "prompt: required")
				return
			}
		}
		maxTokens := s.cfg.maxTokensOut
		for _, key := range []string{"max_tokens", "max_completion_tokens", "max_new_tokens"} {
			if f, ok := req[key].(float64); ok && int(f) < maxTokens {
				maxTokens = int(f)
			}
		}
		if maxTokens < 1 {
			maxTokens = 1
		}
		stream, _ := req["stream"].(bool)

		// Wait for a slot (STUB_MAX_RUNNING), then run.
		if s.slots != nil {
			s.mu.Lock()
			s.waiting++
			s.mu.Unlock()
			select {
			case s.slots <- struct{}{}:
			case <-r.Context().Done():
				s.mu.Lock()
				s.waiting--
				s.mu.Unlock()
				return
			}
			defer func() { <-s.slots }()
			s.mu.Lock()
			s.waiting--
			s.mu.Unlock()
		}
		step, source := s.record(req, r)
		s.mu.Lock()
		s.running++
		s.seq++
		id := fmt.Sprintf("%s-%d", hostname, s.seq)
		s.mu.Unlock()
		defer func() {
			s.mu.Lock()
			s.running--
			s.mu.Unlock()
		}()
		log.Printf("%s %s as %s step (model %s, stream %v, max_tokens %d)%s", r.Method, r.URL.Path, step, model, stream, maxTokens, source)

		tokens := make([]string, 0, maxTokens)
		for i := 0; i < maxTokens && i < len(words); i++ {
			tokens = append(tokens, words[i])
		}
		promptTokens := countTokens(prompt)
		extra := s.kvTransferAnswer(req, id)
		w.Header().Set("X-Stub-Step", step)
		if stream {
			s.streamAnswer(w, r, chat, id, model, tokens, promptTokens, req, extra)
		} else {
			s.wholeAnswer(w, r, chat, id, model, tokens, promptTokens, extra)
		}
		s.mu.Lock()
		s.success++
		s.promptTokens += promptTokens
		s.genTokens += len(tokens)
		s.mu.Unlock()
	}
}

// record counts the step this request is for this Pod: a prefill on a prefiller, a decode on a
// decoder (noting which prefiller's KV it was told to pull), a whole request on a server.
func (s *engineState) record(req map[string]any, r *http.Request) (string, string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.completions++
	switch s.cfg.role {
	case "prefill":
		s.prefillSteps++
		return "prefill", ""
	case "decode":
		s.decodeSteps++
		from := ""
		if params, ok := req["kv_transfer_params"].(map[string]any); ok {
			from, _ = params["remote_engine_id"].(string)
		}
		if from == "" {
			from = r.Header.Get(headerPrefilledBy)
		}
		if from == "" {
			if host, ok := req["bootstrap_host"].(string); ok {
				from = host
			}
		}
		if from == "" {
			from = "(none: decoded without a prefill step)"
		}
		s.prefilledBy[from]++
		return "decode", " prefilled by " + from
	}
	return "whole", ""
}

// kvTransferAnswer: a vLLM prefiller hands the decoder what it needs to pull the KV blocks
// (vLLM's Mooncake/NIXL connectors answer kv_transfer_params; the router copies them on).
func (s *engineState) kvTransferAnswer(req map[string]any, id string) map[string]any {
	if s.cfg.role != "prefill" {
		return nil
	}
	return map[string]any{"do_remote_prefill": true, "do_remote_decode": false, "remote_engine_id": hostname,
		"remote_host": podIP(), "remote_port": s.cfg.bootstrapPort, "remote_block_ids": []int{0, 1},
		"remote_request_id": id}
}

func (s *engineState) wholeAnswer(w http.ResponseWriter, r *http.Request, chat bool, id, model string, tokens []string,
	promptTokens int, kv map[string]any) {
	for range tokens {
		s.pause(r)
	}
	text := strings.Join(tokens, " ")
	finish := "length"
	if len(tokens) == len(words) {
		finish = "stop"
	}
	choice := map[string]any{"index": 0, "finish_reason": finish, "logprobs": nil}
	object := "text_completion"
	if chat {
		choice["message"] = map[string]any{"role": "assistant", "content": text}
		object = "chat.completion"
		id = "chatcmpl-" + id
	} else {
		choice["text"] = text
		id = "cmpl-" + id
	}
	out := map[string]any{"id": id, "object": object, "created": time.Now().Unix(), "model": model,
		"choices": []any{choice},
		"usage": map[string]any{"prompt_tokens": promptTokens, "completion_tokens": len(tokens),
			"total_tokens": promptTokens + len(tokens)}}
	if kv != nil {
		out["kv_transfer_params"] = kv
	}
	writeJSON(w, 200, out)
}

func (s *engineState) streamAnswer(w http.ResponseWriter, r *http.Request, chat bool, id, model string, tokens []string,
	promptTokens int, req map[string]any, kv map[string]any) {
	w.Header().Set("Content-Type", "text/event-stream")
	w.Header().Set("Cache-Control", "no-cache")
	w.WriteHeader(200)
	flusher, _ := w.(http.Flusher)
	object := "text_completion"
	prefix := "cmpl-"
	if chat {
		object, prefix = "chat.completion.chunk", "chatcmpl-"
	}
	send := func(choice map[string]any, extra map[string]any) {
		chunk := map[string]any{"id": prefix + id, "object": object, "created": time.Now().Unix(), "model": model}
		if choice != nil {
			chunk["choices"] = []any{choice}
		} else {
			chunk["choices"] = []any{}
		}
		for k, v := range extra {
			chunk[k] = v
		}
		raw, _ := json.Marshal(chunk)
		fmt.Fprintf(w, "data: %s\n\n", raw)
		if flusher != nil {
			flusher.Flush()
		}
	}
	piece := func(text string, finish any) map[string]any {
		if chat {
			delta := map[string]any{"content": text}
			return map[string]any{"index": 0, "delta": delta, "logprobs": nil, "finish_reason": finish}
		}
		return map[string]any{"index": 0, "text": text, "logprobs": nil, "finish_reason": finish}
	}
	if chat {
		send(map[string]any{"index": 0, "delta": map[string]any{"role": "assistant", "content": ""}, "logprobs": nil,
			"finish_reason": nil}, nil)
	}
	for i, t := range tokens {
		s.pause(r)
		if r.Context().Err() != nil {
			return
		}
		if i > 0 {
			t = " " + t
		}
		send(piece(t, nil), nil)
	}
	finish := "length"
	if len(tokens) == len(words) {
		finish = "stop"
	}
	var extra map[string]any
	if kv != nil {
		extra = map[string]any{"kv_transfer_params": kv}
	}
	send(piece("", finish), extra)
	if opts, ok := req["stream_options"].(map[string]any); ok && opts["include_usage"] == true {
		send(nil, map[string]any{"usage": map[string]any{"prompt_tokens": promptTokens,
			"completion_tokens": len(tokens), "total_tokens": promptTokens + len(tokens)}})
	}
	fmt.Fprint(w, "data: [DONE]\n\n")
	if flusher != nil {
		flusher.Flush()
	}
}

func (s *engineState) pause(r *http.Request) {
	if s.cfg.tokenDelay > 0 {
		select {
		case <-time.After(s.cfg.tokenDelay):
		case <-r.Context().Done():
		}
	}
}

// --- /metrics, /stub/info -------------------------------------------------------------------------

func (s *engineState) metrics(w http.ResponseWriter, r *http.Request) {
	if !s.cfg.metricsOn {
		// SGLang without --enable-metrics has no /metrics route at all.
		http.NotFound(w, r)
		return
	}
	s.mu.Lock()
	running, waiting, success, prompt, gen := s.running, s.waiting, s.success, s.promptTokens, s.genTokens
	s.mu.Unlock()
	var b strings.Builder
	metric := func(name, kind, help, labels string, value int) {
		fmt.Fprintf(&b, "# HELP %s %s\n# TYPE %s %s\n%s{%s} %d.0\n", name, help, name, kind, name, labels, value)
	}
	model := s.cfg.served[0]
	if s.cfg.kind.name == "vLLM" {
		// vLLM 0.33's names and labels (vllm/v1/metrics/loggers.py): model_name and engine.
		l := fmt.Sprintf(`engine="0",model_name=%q`, model)
		metric("vllm:num_requests_running", "gauge", "Number of requests in model execution batches.", l, running)
		metric("vllm:num_requests_waiting", "gauge", "Number of requests waiting to be processed.", l, waiting)
		metric("vllm:kv_cache_usage_perc", "gauge", "KV-cache usage. 1 means 100 percent usage.", l, 0)
		metric("vllm:request_success_total", "counter", "Count of successfully processed requests.",
			fmt.Sprintf(`engine="0",finished_reason="stop",model_name=%q`, model), success)
		metric("vllm:prompt_tokens_total", "counter", "Number of prefill tokens processed.", l, prompt)
		metric("vllm:generation_tokens_total", "counter", "Number of generation tokens processed.", l, gen)
	} else {
		// SGLang 0.5.23's names and labels (sglang/srt/observability/metrics_collector.py).
		engineType := map[string]string{"server": "unified", "prefill": "prefill", "decode": "decode"}[s.cfg.role]
		l := fmt.Sprintf(`engine_type=%q,model_name=%q,moe_ep_rank="0",pp_rank="0",tp_rank="0"`, engineType, model)
		t := fmt.Sprintf(`engine_type=%q,is_streaming="false",model_name=%q`, engineType, model)
		metric("sglang:num_running_reqs", "gauge", "The number of running requests.", l, running)
		metric("sglang:num_queue_reqs", "gauge", "The number of requests in the waiting queue.", l, waiting)
		metric("sglang:token_usage", "gauge", "The token usage.", l, 0)
		metric("sglang:num_requests_total", "counter", "Number of requests processed.", t, success)
		metric("sglang:prompt_tokens_total", "counter", "Number of prefill tokens processed.", t, prompt)
		metric("sglang:generation_tokens_total", "counter", "Number of generation tokens processed.", t, gen)
	}
	w.Header().Set("Content-Type", "text/plain; version=0.0.4; charset=utf-8")
	io.WriteString(w, b.String())
}

func (s *engineState) info(w http.ResponseWriter, r *http.Request) {
	why := s.why()
	s.mu.Lock()
	defer s.mu.Unlock()
	var options []map[string]any
	for _, o := range s.cfg.parsed.Options {
		entry := map[string]any{"flag": o.Flag, "token": o.Token, "values": o.Values}
		if o.Member != "" {
			entry["member"] = o.Member
		}
		options = append(options, entry)
	}
	var followers []map[string]any
	indexes := make([]int, 0, len(s.followers))
	for i := range s.followers {
		indexes = append(indexes, i)
	}
	sort.Ints(indexes)
	for _, i := range indexes {
		followers = append(followers, s.followers[i])
	}
	prefilledBy := map[string]int{}
	for k, v := range s.prefilledBy {
		prefilledBy[k] = v
	}
	out := map[string]any{
		"program":            "engine",
		"engine":             s.cfg.kind.name,
		"role":               s.cfg.role,
		"member_index":       s.cfg.memberIndex,
		"group_size":         s.cfg.groupSize,
		"leader_address":     s.cfg.leaderAddress,
		"argv":               os.Args,
		"env":                environ(),
		"hostname":           hostname,
		"pod_ip":             podIP(),
		"requests_served":    s.served.get(),
		"completions":        s.completions,
		"prefill_steps":      s.prefillSteps,
		"decode_steps":       s.decodeSteps,
		"prefilled_by":       prefilledBy,
		"model":              s.cfg.model,
		"served_model_names": s.cfg.served,
		"host":               s.cfg.host,
		"port":               s.cfg.port,
		"listen_port":        s.cfg.listen,
		"options":            options,
		"kv_transfer_config": s.cfg.kvTransfer,
		"kv_cache_client":    s.cfg.kvCacheClient,
		"metrics_enabled":    s.cfg.metricsOn,
		"healthy":            why == "",
		"unhealthy_reason":   why,
		"load_seconds":       s.cfg.loadDelay.Seconds(),
		"started_at":         startedAt.UTC().Format(time.RFC3339Nano),
		"security":           security(),
	}
	if s.cfg.groupSize > 1 {
		if s.cfg.memberIndex == 0 {
			out["followers"] = followers
		} else {
			out["leader"] = s.leader
			out["leader_connected"] = s.leaderUp
		}
	}
	writeJSON(w, 200, out)
}

func contains(list []string, s string) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}

// readSSE is shared with the routers: it copies an event stream line by line, flushing each event.
func copyStream(w http.ResponseWriter, body io.Reader) error {
	flusher, _ := w.(http.Flusher)
	reader := bufio.NewReader(body)
	for {
		line, err := reader.ReadBytes('\n')
		if len(line) > 0 {
			if _, werr := w.Write(line); werr != nil {
				return werr
			}
			if flusher != nil && bytes.Equal(bytes.TrimSpace(line), nil) {
				flusher.Flush()
			}
		}
		if err == io.EOF {
			if flusher != nil {
				flusher.Flush()
			}
			return nil
		}
		if err != nil {
			return err
		}
	}
}
