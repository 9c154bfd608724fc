// Command stub is the entrypoint of every engine and router image the e2e tests load into the real
// node's containerd (tests/e2e/stub/README.md). It chooses what to be from the name it was started
// under (argv[0], a symlink in the image) and its first arguments, exactly as the rendered Pod
// starts the real program:
//
//	vllm serve MODEL ...                       vLLM's OpenAI server
//	python3 -m sglang.launch_server ...        SGLang's server
//	python3 -m vllm.entrypoints.openai.api_server ... / sglang serve ...   (take-over commands)
//	python3 -m sglang_router.launch_router ... sglang-gateway (the image's entrypoint)
//	vllm-router ...                            vllm-router
//	envoy ... / epp ... / pd-sidecar ...       llm-d-router: Envoy, the Endpoint Picker, the
//	                                           P/D routing sidecar
//
// `stub NAME ARGS...` runs as NAME (for running it outside an image).
package main

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
)

func main() {
	name := filepath.Base(os.Args[0])
	args := os.Args[1:]
	if name == "stub" && len(args) > 0 {
		name, args = filepath.Base(args[0]), args[1:]
	}
	switch name {
	case "vllm":
		if len(args) == 0 || args[0] != "serve" {
			die(2, "vllm: the stub runs only `vllm serve ...`, got %q", args)
		}
		runEngine(engineVLLM, args[1:])
	case "sglang":
		if len(args) == 0 || args[0] != "serve" {
			die(2, "sglang: the stub runs only `sglang serve ...`, got %q", args)
		}
		runEngine(engineSGLang, sglangServeArgs(args[1:]))
	case "python3", "python":
		module, rest := pythonModule(args)
		switch module {
		case "sglang.launch_server":
			runEngine(engineSGLang, rest)
		case "vllm.entrypoints.openai.api_server":
			runEngine(engineVLLM, rest)
		case "vllm.entrypoints.cli.main":
			if len(rest) == 0 || rest[0] != "serve" {
				die(2, "python3 -m vllm.entrypoints.cli.main: the stub runs only `serve`, got %q", rest)
			}
			runEngine(engineVLLM, rest[1:])
		case "sglang_router.launch_router":
			runSGLangGateway(rest)
		default:
			die(2, "python3: the stub runs only `-m` with an engine or router module, got %q", args)
		}
	case "vllm-router":
		runVLLMRouter(args)
	case "envoy":
		runEnvoy(args)
	case "epp":
		runEPP(args)
	case "pd-sidecar":
		runSidecar(args)
	default:
		die(2, "stub: started as %q, which is none of the programs it stands in for", name)
	}
}

// pythonModule reads `python3 [-u|-B|...] -m MODULE ARGS...`.
func pythonModule(args []string) (string, []string) {
	for i := 0; i < len(args); i++ {
		a := args[i]
		if a == "-m" && i+1 < len(args) {
			return args[i+1], args[i+2:]
		}
		if strings.HasPrefix(a, "-m") && len(a) > 2 {
			return a[2:], args[i+1:]
		}
		// Interpreter switches without a value (-u, -B, -O, -E, -s, -I) may come first.
		if len(a) >= 2 && a[0] == '-' && strings.Trim(a[1:], "uBOEsIq") == "" {
			continue
		}
		break
	}
	return "", args
}

// sglangServeArgs: `sglang serve` drops an exact `--model-type X` before the server parser reads the
// line (app/engines/sglang.py serve_args).
func sglangServeArgs(args []string) []string {
	var out []string
	for i := 0; i < len(args); i++ {
		if args[i] == "--model-type" {
			i++
			continue
		}
		if strings.HasPrefix(args[i], "--model-type=") {
			continue
		}
		out = append(out, args[i])
	}
	return out
}

// die prints the refusal on stderr and exits: how a real engine fails on a bad command line.
func die(code int, format string, a ...any) {
	fmt.Fprintf(os.Stderr, format+"\n", a...)
	os.Exit(code)
}
