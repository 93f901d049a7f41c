#!/bin/bash
# The one rule for counting a node's EFA devices, sourced by the prolog
# (prolog.d/90-fmctl-node-check.sh) and the node check (node-check.sh), whose list
# `fmctl check` judges: one device per distinct `domain:` of the `provider: efa` entries of
# endpoint type FI_EP_RDM.
#
# Why not count `provider: efa` lines: libfabric >= 2.0 (fi_info prints `version: 201.0`;
# current EFA installers) lists every device twice for FI_EP_RDM, under `fabric: efa-direct`
# and `fabric: efa` (fi_efa(7): "For reliable datagram (RDM) EP type, it supports two fabric
# names"; ofiwg/libfabric#10735 returns efa-direct first), and once more as an FI_EP_DGRAM
# `-dgrm` domain without a -t filter. libfabric 1.x lists each device once, `fabric: efa`.
# A p5.48xlarge thus shows 32 devices on either, not 64.

# The fi_info the EFA installer puts on the node (/opt/amazon/efa/bin), else PATH's.
fmctl_fi_info_path() {
  if [ -x /opt/amazon/efa/bin/fi_info ]; then
    echo /opt/amazon/efa/bin/fi_info
  else
    echo fi_info
  fi
}

# fi_info's output on stdin -> the EFA RDM domains, one per line, in order of appearance.
# An entry starts at `provider:`; its `type:` comes after its `domain:`, so the decision is
# made when the entry ends.
fmctl_efa_rdm_domains() {
  awk '
    function flush() {
      if (provider == "efa" && type == "FI_EP_RDM" && domain != "" && !(domain in seen)) {
        seen[domain] = 1
        print domain
      }
      provider = ""; type = ""; domain = ""
    }
    /^[[:space:]]*provider:/ { flush(); provider = $2; next }
    /^[[:space:]]*domain:/ { domain = $2; next }
    /^[[:space:]]*type:/ { type = $2; next }
    END { flush() }
  '
}
