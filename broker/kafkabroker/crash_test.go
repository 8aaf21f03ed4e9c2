package kafkabroker_test

import (
	"bufio"
	"context"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/svc-dev/svc"
	"github.com/svc-dev/svc/broker/kafkabroker"
	"github.com/svc-dev/svc/fleetwire"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"
)

// The crashing member: a child process (this test binary) that subscribes,
// says which attempt it got, and blocks until it is killed.
const (
	crashURL  = "SVC_KAFKA_CRASH_URL"
	crashSubj = "SVC_KAFKA_CRASH_SUBJECT"
)

func TestCrashingMember(t *testing.T) {
	url := os.Getenv(crashURL)
	if url == "" {
		t.Skip("the child process of TestAttemptsCountedAcrossCrashes")
	}
	b := connectShortSession(t, url)
	_, err := b.Subscribe(context.Background(), os.Getenv(crashSubj),
		svc.SubscribeOptions{Group: "g", ConsumerID: "crash", MaxDeliver: 2, AckWait: time.Hour},
		func(ctx context.Context, d *svc.Delivery) {
			fmt.Printf("ATTEMPT %d %s\n", d.Attempt, d.Data)
			select {} // until SIGKILL
		})
	if err != nil {
		t.Fatal(err)
	}
	fmt.Println("SUBSCRIBED")
	select {}
}

// connectShortSession connects with a 2 s session timeout instead of
// the broker's 10 s, so that the group notices a killed member sooner
// (the test waits for that twice; its cluster allows sessions that short).
func connectShortSession(t *testing.T, url string) *kafkabroker.Broker {
	t.Helper()
	return connectWith(t, url, kafkabroker.Options{ExtraOpts: []kgo.Opt{
		kgo.SessionTimeout(2 * time.Second), kgo.HeartbeatInterval(200 * time.Millisecond)}})
}

// crashOnce runs a member in a child process until it reports an attempt,
// then kills it, and returns that attempt.
func crashOnce(t *testing.T, url, subj string) int {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^TestCrashingMember$")
	cmd.Env = append(os.Environ(), crashURL+"="+url, crashSubj+"="+subj)
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	cmd.Stderr = os.Stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	lines := make(chan string)
	defer func() {
		_ = cmd.Process.Kill() // SIGKILL: no stop, no commit, no leaving the group
		for range lines {
		}
		_ = cmd.Wait()
	}()
	go func() {
		defer close(lines)
		sc := bufio.NewScanner(out)
		for sc.Scan() {
			lines <- sc.Text()
		}
	}()
	timeout := time.After(90 * time.Second)
	for {
		select {
		case l, ok := <-lines:
			if !ok {
				t.Fatal("the crashing member exited before it got the task")
			}
			var n int
			var data string
			if _, err := fmt.Sscanf(l, "ATTEMPT %d %s", &n, &data); err == nil && strings.HasPrefix(l, "ATTEMPT") {
				return n
			}
		case <-timeout:
			t.Fatal("the crashing member never got the task")
		}
	}
}

// TestAttemptsCountedAcrossCrashes: a task whose member is killed (SIGKILL,
// nothing committed by hand) is delivered to the next member with its
// attempt counted, and after MaxDeliver crashed deliveries it goes to the
// dead letter instead of a third member.
func TestAttemptsCountedAcrossCrashes(t *testing.T) {
	url := cluster(t, kfake.BrokerConfigs(map[string]string{"group.min.session.timeout.ms": "1000"}))
	subj := fleetwire.TaskSubject("crash")
	pub := connect(t, url)
	defer pub.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	if err := pub.Publish(ctx, subj, []byte("kills-its-worker")); err != nil {
		t.Fatal(err)
	}
	for want := 1; want <= 2; want++ {
		if got := crashOnce(t, url, subj); got != want {
			t.Fatalf("crashed member %d saw attempt %d, want %d", want, got, want)
		}
	}
	hook := make(chan svc.DeadLetter, 1)
	ran := make(chan int, 1)
	b := connectShortSession(t, url)
	defer b.Close()
	if _, err := b.Subscribe(ctx, subj, svc.SubscribeOptions{Group: "g", ConsumerID: "last", MaxDeliver: 2,
		OnDeadLetter: func(_ context.Context, dl svc.DeadLetter) { hook <- dl }},
		func(ctx context.Context, d *svc.Delivery) { ran <- d.Attempt; _ = d.Ack(ctx) }); err != nil {
		t.Fatal(err)
	}
	select {
	case dl := <-hook:
		if dl.Deliveries != 2 {
			t.Errorf("dead letter after two crashes counts %d deliveries", dl.Deliveries)
		}
	case n := <-ran:
		t.Fatalf("the task ran a third time (attempt %d) past MaxDeliver 2", n)
	case <-ctx.Done():
		t.Fatal("no dead letter")
	}
}
