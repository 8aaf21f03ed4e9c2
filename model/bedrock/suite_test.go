package bedrock_test

import (
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/credentials"
	"go.uber.org/goleak"

	svc "github.com/svc-dev/svc"
	"github.com/svc-dev/svc/llmsim"
	"github.com/svc-dev/svc/model/bedrock"
	"github.com/svc-dev/svc/model/modeltest"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// TestSuite runs the model provider contract suite on the provider,
// through aws-sdk-go-v2's bedrockruntime (SigV4-signed Converse calls),
// against llmsim speaking Bedrock's Converse API.
func TestSuite(t *testing.T) {
	modeltest.Run(t, modeltest.Provider{
		Name:  bedrock.Provider,
		Model: scripted,
		Failures: []modeltest.Failure{
			modeltest.RateLimited, modeltest.Overloaded, modeltest.ServerError,
			modeltest.AuthFailed, modeltest.InvalidRequest, modeltest.Malformed,
		},
		SplitUsage: true,
		BadSettings: []map[string]any{
			{"temperature": "hot"},
			{"max_tokens": 1.5},
			{"max_tokens": -1},
			{"stop": 5},
			{"region": 3},
			{"timeout": "soon"},
			{"max_retries": -1},
			{"base_url": "localhost:8080"},
			{"stream": "yes"},
			{"stream_idle_timeout_ms": 0},
		},
	})
}

// accessKey is the access key id the tests sign with; llmsim counts
// calls by it.
const accessKey = "AKIDSVCTEST"

func awsConfig() *aws.Config {
	return &aws.Config{Region: "eu-west-1", Credentials: credentials.NewStaticCredentialsProvider(accessKey, "secret", "")}
}

func scripted(t *testing.T, s modeltest.Script) modeltest.Scripted {
	t.Helper()
	sim := start(t, llmsim.Config{Scenario: &llmsim.Scenario{Rules: []llmsim.Rule{modeltest.SimRule(t, s, "503")}}})
	m := newModel(t, sim, modeltest.ModelName)
	return modeltest.Scripted{Model: m, Calls: func() int { return sim.Stats()[accessKey+"/"+modeltest.ModelName] }}
}

func start(t *testing.T, cfg llmsim.Config) *llmsim.Server {
	t.Helper()
	sim := llmsim.New(cfg)
	if err := sim.Start("127.0.0.1:0"); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = sim.Close() })
	return sim
}

func newModel(t *testing.T, sim *llmsim.Server, name string) svc.Model {
	t.Helper()
	m, err := bedrock.NewWithConfig(name, bedrock.Config{AWS: awsConfig(), BaseURL: sim.URL(), MaxBackoff: 5 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	return m
}

func simModel(t *testing.T, cfg llmsim.Config) svc.Model {
	return newModel(t, start(t, cfg), "amazon.nova-lite-v1:0")
}

// A prompt over the model's context window is a context-length error
// (modeltest), read from Bedrock's ValidationException.
func TestContextWindowErrorThroughSDK(t *testing.T) {
	modeltest.ContextWindowErrorThroughSDK(t, simModel, "amazon.nova-lite-v1:0")
}
