# Certificates and kubeconfigs for an API server of the project's own, sourced by
# scripts/k8s-lab/cluster.sh (the lab cluster) and tests/bench/k8s_registry_bench.py (a bare
# etcd + kube-apiserver). One CA signs every serving and client certificate; the API server
# maps a client certificate's CN to the user and each O to a group (system:masters: admin).
# Every function takes the directory it writes to; nothing here starts or stops anything.

pki_ca() { # pki_ca DIR CN: the CA (DIR/ca.crt, DIR/ca.key), valid 30 days
  mkdir -p "$1" && chmod 700 "$1"
  openssl req -x509 -newkey rsa:2048 -nodes -keyout "$1/ca.key" -out "$1/ca.crt" \
    -days 30 -subj "/CN=$2" 2>/dev/null
}

pki_cert() { # pki_cert DIR NAME SUBJECT [SAN]: DIR/NAME.{crt,key}; with SAN a serving+client cert
  local dir=$1 name=$2 subj=$3 san=${4:-} ext=$1/$2.ext
  openssl genrsa -out "$dir/$name.key" 2048 2>/dev/null
  openssl req -new -key "$dir/$name.key" -subj "$subj" -out "$dir/$name.csr" 2>/dev/null
  {
    echo "basicConstraints=CA:FALSE"
    echo "keyUsage=critical,digitalSignature,keyEncipherment"
    if [[ -n $san ]]; then echo "extendedKeyUsage=serverAuth,clientAuth"; echo "subjectAltName=$san"
    else echo "extendedKeyUsage=clientAuth"; fi
  } >"$ext"
  openssl x509 -req -in "$dir/$name.csr" -CA "$dir/ca.crt" -CAkey "$dir/ca.key" \
    -CAcreateserial -days 30 -sha256 -extfile "$ext" -out "$dir/$name.crt" 2>/dev/null
  rm -f "$dir/$name.csr" "$ext"
}

pki_service_account_keys() { # pki_service_account_keys DIR: DIR/sa.{key,pub}, the token signing pair
  openssl genrsa -out "$1/sa.key" 2048 2>/dev/null
  openssl rsa -in "$1/sa.key" -pubout -out "$1/sa.pub" 2>/dev/null
}

pki_kubeconfig() { # pki_kubeconfig FILE CLUSTER SERVER DIR NAME: FILE authenticates as DIR/NAME.crt
  cat >"$1" <<EOF
apiVersion: v1
kind: Config
clusters:
- name: $2
  cluster:
    server: $3
    certificate-authority: $4/ca.crt
users:
- name: $5
  user:
    client-certificate: $4/$5.crt
    client-key: $4/$5.key
contexts:
- name: $2
  context: {cluster: $2, user: $5}
current-context: $2
EOF
}
