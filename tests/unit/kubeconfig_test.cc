#include "proxy/config/kubeconfig.h"

#include "gtest/gtest.h"

namespace ferry::config {
namespace {

constexpr const char* kKubeconfig = R"(apiVersion: v1
kind: Config
preferences: {colors: true}
clusters:
- name: other
  cluster: {server: "https://wrong:1"}
- name: lab
  cluster:
    server: https://10.244.0.1:6443
    certificate-authority: pki/ca.crt
    extensions: [{name: x, extension: {}}]
contexts:
- name: lab-admin
  context: {cluster: lab, user: admin, namespace: default}
current-context: lab-admin
users:
- name: admin
  user:
    client-certificate-data: Q0VSVA==
    client-key: /abs/admin.key
    tokenFile: token
)";

TEST(Kubeconfig, CurrentContextGivesServerCaAndCredentials) {
  auto k = parseKubeconfig(kKubeconfig, "kc", "/etc/fy");
  ASSERT_TRUE(k.ok()) << k.status();
  EXPECT_EQ(k->server, "https://10.244.0.1:6443");
  EXPECT_EQ(k->ca_file, "/etc/fy/pki/ca.crt") << "relative to the kubeconfig's directory";
  EXPECT_EQ(k->client_cert_pem, "CERT");
  EXPECT_EQ(k->client_key_file, "/abs/admin.key");
  EXPECT_EQ(k->token_file, "/etc/fy/token");
  EXPECT_TRUE(k->token.empty());
}

TEST(Kubeconfig, RefusesWhatFerrydCannotHonour) {
  struct Case {
    const char* yaml;
    const char* error;
  } cases[] = {
      {"clusters: []\n", "no current-context"},
      {"current-context: x\ncontexts: []\n", "no entry named 'x'"},
      {"current-context: c\ncontexts: [{name: c, context: {cluster: k, user: u}}]\nclusters: [{name: k, cluster: "
       "{server: 'https://a', insecure-skip-tls-verify: true}}]\n",
       "insecure-skip-tls-verify"},
      {"current-context: c\ncontexts: [{name: c, context: {cluster: k, user: u}}]\nclusters: [{name: k, cluster: "
       "{server: 'https://a'}}]\nusers: [{name: u, user: {exec: {command: aws}}}]\n",
       "not supported"},
      {"current-context: c\ncontexts: [{name: c, context: {cluster: k, user: u}}]\nclusters: [{name: k, cluster: "
       "{server: 'https://a', certificate-authority-data: '***'}}]\n",
       "base64"},
      {"current-context: c\ncontexts: [{name: c, context: {cluster: k}}]\nclusters: [{name: k, cluster: {}}]\n",
       "no server"},
  };
  for (const auto& c : cases) {
    auto k = parseKubeconfig(c.yaml, "kc", "");
    ASSERT_FALSE(k.ok()) << c.yaml;
    EXPECT_NE(std::string(k.status().message()).find(c.error), std::string::npos) << k.status();
  }
}

}  // namespace
}  // namespace ferry::config
