"""One tiny file per GLUE layout, with the labels `prepare` must read from
it (shared by the data unit tests and the MNLI end-to-end run)."""

# One tiny file per GLUE layout: (task, {file: text}, expected train labels).
GLUE_LAYOUTS = {
    "CoLA": ({"train.tsv": "gj04\t1\t\tthe movie was good\ngj04\t0\t*\tgood the was\n",
              "dev.tsv": "gj04\t1\t\tit is fun\n",
              "test.tsv": "index\tsentence\n0\tfun it is\n"}, [1, 0]),
    "MRPC": ({"train.tsv": "Quality\t#1 ID\t#2 ID\t#1 String\t#2 String\n"
                           "1\t1\t2\tthe movie\ta film\n0\t3\t4\tgood\tbad\n",
              "dev.tsv": "Quality\t#1 ID\t#2 ID\t#1 String\t#2 String\n1\t5\t6\tfun\tfun\n",
              "test.tsv": "index\t#1 ID\t#2 ID\t#1 String\t#2 String\n0\t1\t2\ta\tb\n"},
             [1, 0]),
    "QQP": ({"train.tsv": "id\tqid1\tqid2\tquestion1\tquestion2\tis_duplicate\n"
                          "0\t1\t2\tis it good\tis it fun\t1\n",
             "dev.tsv": "id\tqid1\tqid2\tquestion1\tquestion2\tis_duplicate\n"
                        "1\t3\t4\ta\tb\t0\n",
             "test.tsv": "id\tquestion1\tquestion2\n0\ta\tb\n"}, [1]),
    "STS-B": ({"train.tsv": "index\tgenre\tfilename\tyear\told_index\tsource1\tsource2"
                            "\tsentence1\tsentence2\tscore\n"
                            "0\tg\tf\t2012\t1\ts\ts\ta movie\ta film\t4.250\n",
               "dev.tsv": "index\tgenre\tfilename\tyear\told_index\tsource1\tsource2"
                          "\tsentence1\tsentence2\tscore\n"
                          "0\tg\tf\t2012\t1\ts\ts\tgood\tbad\t0.5\n"}, [4.25]),
    "MNLI": ({"train.tsv": "index\tpromptID\tpairID\tgenre\tsentence1_binary_parse"
                           "\tsentence2_binary_parse\tsentence1_parse\tsentence2_parse"
                           "\tsentence1\tsentence2\tlabel1\tgold_label\n"
                           "0\t1\t1\tg\tp\tp\tp\tp\tit is good\tit is fun\tneutral\tneutral\n",
              "dev_matched.tsv": "index\tpromptID\tpairID\tgenre\tsentence1_binary_parse"
                                 "\tsentence2_binary_parse\tsentence1_parse\tsentence2_parse"
                                 "\tsentence1\tsentence2\tlabel1\tlabel2\tlabel3\tlabel4"
                                 "\tlabel5\tgold_label\n0\t1\t1\tg\tp\tp\tp\tp\ta\tb"
                                 "\te\te\te\te\te\tentailment\n",
              "dev_mismatched.tsv": "index\tpromptID\tpairID\tgenre\tsentence1_binary_parse"
                                    "\tsentence2_binary_parse\tsentence1_parse"
                                    "\tsentence2_parse\tsentence1\tsentence2\tlabel1\tlabel2"
                                    "\tlabel3\tlabel4\tlabel5\tgold_label\n0\t1\t1\tg\tp\tp"
                                    "\tp\tp\ta\tb\tc\tc\tc\tc\tc\tcontradiction\n",
              "diagnostic.tsv": "index\tsentence1\tsentence2\n0\ta\tb\n"}, [2]),
    "QNLI": ({"train.tsv": "index\tquestion\tsentence\tlabel\n0\tis it\tit is\tnot_entailment\n",
              "dev.tsv": "index\tquestion\tsentence\tlabel\n0\ta\tb\tentailment\n"}, [1]),
    "RTE": ({"train.tsv": "index\tsentence1\tsentence2\tlabel\n0\ta\tb\tentailment\n",
             "dev.tsv": "index\tsentence1\tsentence2\tlabel\n0\ta\tb\tnot_entailment\n"}, [0]),
    "WNLI": ({"train.tsv": "index\tsentence1\tsentence2\tlabel\n0\ta\tb\t1\n",
              "dev.tsv": "index\tsentence1\tsentence2\tlabel\n0\ta\tb\t0\n"}, [1]),
}
