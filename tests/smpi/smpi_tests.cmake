# SMPI ping-pong on the shipped platforms: the one-way time SMPI measures must equal the route's
# latency + size / bottleneck bandwidth within 1%. The expected values are worked out by hand from
# the figures in platforms/*.xml (see platforms/README.md, "Routes"):
#   NVLink link 300 GB/s, 1 us; NIC link 25 GB/s, 1 us + half the 130 ns switch latency = 1.065 us;
#   workstation GPU link 25 GB/s, 1 us.
smpi_build(plat_pingpong ${CMAKE_CURRENT_BINARY_DIR}/pingpong ${CMAKE_CURRENT_SOURCE_DIR}/smpi/pingpong.c)

# name | hosts (ranks 0 and 1) | platform | bytes | expected one-way seconds
set(PLAT_PINGPONG_CASES
  # same node: 2 NVLink links, 2 us + 1e8 B / 300e9 B/s
  "thetagpu_intra|n0g0 n0g1|thetagpu|100000000|3.3533333e-4"
  # latency-bound: 2 us + 8 / 300e9
  "thetagpu_intra_8B|n3g2 n3g7|thetagpu|8|2.0000267e-6"
  # two nodes, same rail: 2 NIC links through leaf l0r0, 2 x 1.065 us + 1e8 / 25e9
  "thetagpu_rail|n0g0 n1g0|thetagpu|100000000|4.00213e-3"
  # two nodes, different rails: NVLink to n0g1, then rail 1 (PXN-like, 4 links): 2 us + 2.13 us + 1e8 / 25e9
  "thetagpu_cross_rail|n0g0 n1g1|thetagpu|100000000|4.00413e-3"
  "thetagpu_cross_rail_8B|n0g0 n23g1|thetagpu|8|4.13032e-6"
  # workstation: 2 PCIe-class links, 2 us + 1e8 / 25e9
  "workstation|n0g0 n0g1|workstation|100000000|4.002e-3"
)
foreach(c ${PLAT_PINGPONG_CASES})
  string(REPLACE "|" ";" f "${c}")
  list(GET f 0 name)
  list(GET f 1 hosts)
  list(GET f 2 platform)
  list(GET f 3 bytes)
  list(GET f 4 expected)
  string(REPLACE " " "\n" hostlines "${hosts}")
  set(hostfile ${CMAKE_CURRENT_BINARY_DIR}/pingpong_${name}.hosts)
  file(WRITE ${hostfile} "${hostlines}\n")
  add_test(NAME smpi.platform_pingpong_${name}
           COMMAND ${SMPIRUN} -no-privatize -platform platforms/${platform}.xml -hostfile ${hostfile}
                   -np 2 ${CMAKE_CURRENT_BINARY_DIR}/pingpong ${bytes} ${expected}
                   --cfg=smpi/simulate-computation:no --cfg=smpi/wtime:0 --log=root.thres:warning
           WORKING_DIRECTORY ${CMAKE_SOURCE_DIR})
  set_tests_properties(smpi.platform_pingpong_${name} PROPERTIES
                       PASS_REGULAR_EXPRESSION "PASS" FAIL_REGULAR_EXPRESSION "FAIL")
endforeach()
