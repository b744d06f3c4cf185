package main

// What happens once kube-apiserver answers: wait for the controller manager's work, apply the requested
// manifests with kubectl, and write a kubeconfig per requested ServiceAccount.

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"strings"
	"time"

	authenticationv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
)

// tokenLifetime is how long the ServiceAccount tokens written into kubeconfigs stay valid.
const tokenLifetime = 48 * time.Hour

// adminClients are the admin's clients: typed and plain HTTP (for /readyz).
type adminClients struct {
	config    *rest.Config
	clientset *kubernetes.Clientset
	http      *http.Client
}

func newAdminClients(kubeconfig string) (*adminClients, error) {
	config, err := clientcmd.BuildConfigFromFlags("", kubeconfig)
	if err != nil {
		return nil, err
	}
	config.UserAgent = "realkube"
	clientset, err := kubernetes.NewForConfig(config)
	if err != nil {
		return nil, err
	}
	httpClient, err := rest.HTTPClientFor(config)
	if err != nil {
		return nil, err
	}
	httpClient.Timeout = 5 * time.Second
	return &adminClients{config: config, clientset: clientset, http: httpClient}, nil
}

// writeCertKubeconfig writes a kubeconfig that authenticates with a client certificate.
func writeCertKubeconfig(path, server, ca, cert, key, user string) error {
	config := clientcmdapi.NewConfig()
	config.Clusters["realkube"] = &clientcmdapi.Cluster{Server: server, CertificateAuthority: ca}
	config.AuthInfos[user] = &clientcmdapi.AuthInfo{ClientCertificate: cert, ClientKey: key}
	config.Contexts["realkube"] = &clientcmdapi.Context{Cluster: "realkube", AuthInfo: user}
	config.CurrentContext = "realkube"
	if err := clientcmdapi.FlattenConfig(config); err != nil {
		return err
	}
	return clientcmd.WriteToFile(*config, path)
}

// writeTokenKubeconfig writes a kubeconfig that authenticates with a bearer token.
func writeTokenKubeconfig(path string, admin *rest.Config, user, token string) error {
	config := clientcmdapi.NewConfig()
	config.Clusters["realkube"] = &clientcmdapi.Cluster{Server: admin.Host, CertificateAuthorityData: admin.CAData}
	if len(admin.CAData) == 0 {
		ca, err := os.ReadFile(admin.CAFile)
		if err != nil {
			return err
		}
		config.Clusters["realkube"].CertificateAuthorityData = ca
	}
	config.AuthInfos[user] = &clientcmdapi.AuthInfo{Token: token}
	config.Contexts["realkube"] = &clientcmdapi.Context{Cluster: "realkube", AuthInfo: user}
	config.CurrentContext = "realkube"
	return clientcmd.WriteToFile(*config, path)
}

// waitHTTP polls url until it answers 200, a component exits, or the timeout passes.
func waitHTTP(ctx context.Context, running []*component, url string, client *http.Client, timeout time.Duration) error {
	if client == nil {
		client = &http.Client{Timeout: 5 * time.Second}
	}
	deadline := time.Now().Add(timeout)
	last := "no answer yet"
	for time.Now().Before(deadline) {
		if err := exitedComponent(running); err != nil {
			return err
		}
		resp, err := client.Get(url)
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return nil
			}
			last = resp.Status
		} else {
			last = err.Error()
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(200 * time.Millisecond):
		}
	}
	return fmt.Errorf("%s did not answer 200 within %s (last: %s)", url, timeout, last)
}

// exitedComponent reports a component that has already exited.
func exitedComponent(running []*component) error {
	for _, c := range running {
		if exited, err := c.exited(); exited {
			return fmt.Errorf("%s exited: %v", c.name, err)
		}
	}
	return nil
}

// bootstrap waits for the controller manager, applies the manifests and writes the ServiceAccount kubeconfigs.
func bootstrap(ctx context.Context, l layout, admin *adminClients, opts *serveOptions, running []*component) error {
	// The serviceaccount controller creates `default` in every namespace: its presence shows the controller
	// manager runs with working credentials.
	err := poll(ctx, running, "the default ServiceAccount (kube-controller-manager)", 2*time.Minute, func() (bool, error) {
		_, err := admin.clientset.CoreV1().ServiceAccounts("default").Get(ctx, "default", metav1.GetOptions{})
		if apierrors.IsNotFound(err) {
			return false, nil
		}
		return err == nil, err
	})
	if err != nil {
		return err
	}
	for _, manifest := range opts.manifests {
		if err := kubectlApply(l, manifest); err != nil {
			return err
		}
	}
	for _, sa := range opts.serviceAccounts {
		if err := writeServiceAccountKubeconfig(ctx, l, admin, sa, running); err != nil {
			return err
		}
	}
	return nil
}

// kubectlApply applies a manifest with this binary's kubectl, as the admin.
func kubectlApply(l layout, manifest string) error {
	self, err := os.Executable()
	if err != nil {
		return err
	}
	out, err := exec.Command(self, "kubectl", "--kubeconfig", l.adminKubeconfig(), "apply", "-f", manifest).CombinedOutput()
	if err != nil {
		return fmt.Errorf("kubectl apply -f %s: %v\n%s", manifest, err, out)
	}
	fmt.Printf("applied %s\n%s", manifest, out)
	return nil
}

// writeServiceAccountKubeconfig requests a token for NAMESPACE/NAME and writes NAME.kubeconfig.
func writeServiceAccountKubeconfig(ctx context.Context, l layout, admin *adminClients, sa string, running []*component) error {
	namespace, name, err := splitServiceAccount(sa)
	if err != nil {
		return err
	}
	accounts := admin.clientset.CoreV1().ServiceAccounts(namespace)
	if _, err := accounts.Get(ctx, name, metav1.GetOptions{}); apierrors.IsNotFound(err) {
		if _, err := accounts.Create(ctx, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: name}}, metav1.CreateOptions{}); err != nil {
			return fmt.Errorf("creating ServiceAccount %s: %w", sa, err)
		}
	} else if err != nil {
		return fmt.Errorf("reading ServiceAccount %s: %w", sa, err)
	}
	seconds := int64(tokenLifetime.Seconds())
	var token string
	err = poll(ctx, running, "a token for "+sa, 30*time.Second, func() (bool, error) {
		request := &authenticationv1.TokenRequest{Spec: authenticationv1.TokenRequestSpec{ExpirationSeconds: &seconds}}
		answer, err := accounts.CreateToken(ctx, name, request, metav1.CreateOptions{})
		if err != nil {
			return false, nil
		}
		token = answer.Status.Token
		return true, nil
	})
	if err != nil {
		return err
	}
	user := fmt.Sprintf("system:serviceaccount:%s:%s", namespace, name)
	path := l.path(name + ".kubeconfig")
	if err := writeTokenKubeconfig(path, admin.config, user, token); err != nil {
		return err
	}
	fmt.Printf("wrote %s for %s\n", path, user)
	return nil
}

func splitServiceAccount(sa string) (namespace, name string, err error) {
	namespace, name, ok := strings.Cut(sa, "/")
	if !ok || namespace == "" || name == "" || strings.Contains(name, "/") {
		return "", "", fmt.Errorf("--service-account %q: want NAMESPACE/NAME", sa)
	}
	return namespace, name, nil
}

// poll calls check every 200 ms until it reports done, a component exits, or the timeout passes.
func poll(ctx context.Context, running []*component, what string, timeout time.Duration, check func() (bool, error)) error {
	deadline := time.Now().Add(timeout)
	var last error
	for time.Now().Before(deadline) {
		if err := exitedComponent(running); err != nil {
			return err
		}
		done, err := check()
		if done {
			return nil
		}
		last = err
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(200 * time.Millisecond):
		}
	}
	if last == nil {
		last = errors.New("not yet")
	}
	return fmt.Errorf("waiting for %s: gave up after %s: %v", what, timeout, last)
}
